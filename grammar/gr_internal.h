/*
 * gr_internal.h — what the grammar files share (grammar/). Nothing here
 * is part of the public API in grammar.h.
 *
 * The pipeline:
 *
 *   GBNF text ──gr_parse.c──► rules of expression trees (gr_ast, code points)
 *             ──gr_compile.c─► NFA per called rule (non-recursive rules inlined, code-point
 *                              classes as UTF-8 byte sequences) ──subset construction──► DFA
 *   gr_grammar: one DFA per called rule, states numbered globally:
 *       next[state][byte class] → state | -1,  calls[state] = {(rule, return state)}, final flag
 *   gr_config.c: a configuration = a set of (state, stack node) pairs, stacks interned in a pool
 *   gr_match.c: the matcher, a configuration advanced token by token
 *   gr_mask.c:  the vocabulary as a byte trie; per state a cached split of the vocabulary into
 *               accepted / uncertain (needs the stack) / rejected tokens
 *   gr_mcache.c: where those cached splits are kept, per grammar and vocabulary
 *
 * Every file may call gr_util.c (arrays, errors, UTF-8, GBNF text, the compile budget), which
 * calls none of them. Above it calls go one way: gr_cache.c (the cache of compiled grammars and
 * its compile workers) → grammar.c (compiling, reference counts) → gr_regex.c,
 * gr_parse.c, gr_compile.c → gr_dfa.c; grammar.c → gr_mcache.c (freeing and sizing the mask
 * caches); gr_match.c (the matcher) → grammar.c (its reference), gr_mask.c → gr_mcache.c,
 * gr_config.c.
 *
 * Limits (GR_MAX_*) bound what an untrusted grammar can cost: every one of them turns into a
 * compile error (or, at run time, a dropped path, never a wrongly allowed token).
 */
#ifndef KVSERVE_GR_INTERNAL_H
#define KVSERVE_GR_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "grammar/grammar.h"

#define GR_MAX_CP 0x10FFFFu
#define GR_MAX_RULES 8192             /* named rules plus the parser's own */
#define GR_MAX_AST (1 << 20)          /* expression nodes */
#define GR_MAX_NEST 200               /* nesting of groups in the text */
#define GR_MAX_REPEAT 100000          /* m and n of {m,n} */
#define GR_MAX_NFA (1 << 21)          /* NFA states after inlining and repetition */
#define GR_MAX_DFA (1 << 17)          /* DFA states of all rules */
#define GR_MAX_TABLE_BYTES (96u << 20) /* transition tables */
#define GR_BUDGET_STRIDE 4096         /* work units between two looks at the clock */
#define GR_INLINE_LIMIT 20000         /* a rule used more than once is inlined up to this size */
#define GR_MAX_DEPTH 2048             /* matcher stack depth (nesting of recursive rules) */
#define GR_MAX_VISIT 8192             /* (state, stack) pairs visited building one configuration */

/* ---- the compile budget (gr_util.c) -------------------------------------------------------- */

/* A compilation's wall-clock deadline. Every loop whose cost the input controls — the regex
 * translation, parsing, rule lookups, the NFA construction, the subset construction (closures,
 * moves, state interning), pruning and the left-recursion check — charges it units of work (an
 * inner iteration, a byte copied), and the clock is read every GR_BUDGET_STRIDE units: a few
 * tens of microseconds of work, so a compilation stops within a millisecond of its deadline. */
typedef struct gr_budget {
    int64_t deadline_us;  /* clk_now_us() microseconds */
    int limit_ms;         /* the budget's length, for the message */
    int64_t left;         /* units before the next look at the clock */
    int expired;
} gr_budget;

/* A budget ending at deadline_us (0: GR_COMPILE_MS from now). */
void gr__budget_init(gr_budget *b, int64_t deadline_us);
/* Reads the clock (the stride was used up): 1 once the deadline has passed. */
int gr__budget_check(gr_budget *b);
/* Fills err with the deadline's message and returns -EINVAL. */
int gr__budget_fail(const gr_budget *b, gr_error *err);

/* Charges n units of work to b (NULL: unlimited); 1 once its deadline has passed. */
static inline int gr__charge(gr_budget *b, int64_t n)
{
    if (!b) return 0;
    if ((b->left -= n) > 0) return b->expired;
    return gr__budget_check(b);
}

/* ---- helpers (gr_util.c) ------------------------------------------------------------------- */

/* Grows the array *p of *cap elements of elem bytes to hold at least need (doubling). 0 or
 * -ENOMEM (nothing changed). */
int gr__grow(void **p, int *cap, int64_t need, size_t elem);
/* The value of hex digit c, or -1. */
int gr__hexval(int c);

/* Fills err (pos may be -1) and returns -EINVAL. */
int gr__fail(gr_error *err, int pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* UTF-8: decodes one code point of s[0..n) into *cp; returns its length, or -1 if invalid. */
int gr__utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);
/* Encodes cp (≤ 0x10FFFF) into out[4]; returns the length. */
int gr__utf8_encode(uint32_t cp, unsigned char *out);

/* ---- expression trees ----------------------------------------------------------------------- */

enum gr_ast_kind {
    GRA_EMPTY = 0, /* matches "" */
    GRA_LIT,       /* bytes [a, a + b) of the byte pool */
    GRA_CLASS,     /* code-point ranges [a, a + b) of the range pool (sorted, disjoint) */
    GRA_SEQ,       /* children kids[a .. a + b) in order */
    GRA_ALT,       /* one of children kids[a .. a + b) */
    GRA_REP,       /* child a, min..max times (max < 0: unbounded) */
    GRA_REF,       /* rule a */
};

typedef struct gr_ast {
    int kind;    /* enum gr_ast_kind */
    int a, b;    /* see the kinds */
    int min, max;
} gr_ast;

typedef struct gr_range {
    uint32_t lo, hi; /* code points, inclusive */
} gr_range;

typedef struct gr_rule {
    int name;        /* offset into names */
    int body;        /* ast index, -1 while only referenced */
    int ref_pos;     /* source offset of the first reference (for "undefined rule") */
    int def_pos;     /* source offset of the definition */
} gr_rule;

/* Rules and their trees, as the parser builds them. */
typedef struct gr_rules {
    gr_ast *ast;
    int n_ast, cap_ast;
    int *kids;
    int n_kids, cap_kids;
    unsigned char *bytes;
    int n_bytes, cap_bytes;
    gr_range *ranges;
    int n_ranges, cap_ranges;
    gr_rule *rules;
    int n_rules, cap_rules;
    char *names;
    int n_names, cap_names;
    int oom;
} gr_rules;

void gr__rules_free(gr_rules *r);
const char *gr__rule_name(const gr_rules *r, int rule);

/* GBNF text → rules (gr_parse.c). root names the start rule. 0 or -EINVAL / -ENOMEM with err
 * (the budget's message once b expires). */
int gr__parse_gbnf(const char *text, size_t len, const char *root, gr_rules *out, int *root_rule,
                   gr_budget *b, gr_error *err);

/* gr_regex_to_gbnf under budget b (gr_regex.c). */
char *gr__regex_to_gbnf(const char *re, size_t len, int mode, gr_budget *b, gr_error *err);

/* ---- the compiled grammar -------------------------------------------------------------------- */

enum gr_state_flag {
    GR_ST_FINAL = 1, /* the rule may end here */
    GR_ST_CALLS = 2, /* has call edges */
    GR_ST_BYTES = 4, /* has byte edges */
};

typedef struct gr_call {
    int32_t rule;   /* called rule */
    int32_t ret;    /* state to continue in after the callee ends */
} gr_call;

typedef struct gr_mcache gr_mcache; /* per-vocabulary mask cache (gr_mcache.c) */

struct gr_grammar {
    atomic_int refs;
    int n_states;        /* DFA states of all rules */
    int n_classes;       /* byte classes */
    uint8_t cls[256];    /* byte → class */
    int32_t *next;       /* [n_states][n_classes] target state or -1 */
    uint8_t *flags;      /* [n_states] enum gr_state_flag */
    int32_t *rule_of;    /* [n_states] the rule a state belongs to */
    int32_t *call_off;   /* [n_states + 1] calls of state s: calls[call_off[s] .. call_off[s+1]) */
    gr_call *calls;
    int n_rules;         /* called rules (root is rule 0) */
    int32_t *rule_start; /* [n_rules] start state */
    uint8_t *rule_called;/* [n_rules] 1 when some state calls the rule */
    char **rule_names;   /* [n_rules] for messages */
    size_t bytes;        /* memory held by the tables */
    pthread_mutex_t mu;  /* guards caches */
    gr_mcache *caches;   /* one per vocabulary the grammar was used with */
};

/* Compiles parsed rules into g's tables (gr_compile.c); r is rewritten on the way (left
 * recursion). 0 or -EINVAL / -ENOMEM with err; g's tables are untouched on failure. */
int gr__compile_rules(gr_rules *r, int root, gr_grammar *g, gr_budget *b, gr_error *err);

/* The NFA of the called rules, as gr_compile.c hands it to gr_dfa.c. */
enum { GR_E_EPS = -1, GR_E_CALL = -2 };

typedef struct gr_nfa_edge {
    int32_t from, to;
    int32_t lo, hi;  /* byte range; lo = GR_E_EPS; lo = GR_E_CALL with hi = the called rule */
} gr_nfa_edge;

typedef struct gr_nfa {
    int n_states;
    gr_nfa_edge *e;  /* sorted by from once built */
    int n_e, cap_e;
    int32_t *off;    /* [n_states + 1] edges of state s: e[off[s] .. off[s + 1]) */
    int n_rules;     /* called rules; rule 0 is the root */
    int32_t *start, *accept; /* [n_rules] */
    const char *const *names; /* [n_rules] rule names (borrowed) */
} gr_nfa;

/* Determinises f into g's tables, prunes states that cannot complete their rule and refuses
 * left recursion (gr_dfa.c), under budget b. 0 or -EINVAL / -ENOMEM with err; on failure g is
 * untouched. */
int gr__dfa_build(const gr_nfa *f, gr_budget *b, gr_grammar *g, gr_error *err);

/* ---- the per-state mask cache (gr_mcache.c) ----------------------------------------------- */

/* Frees the per-vocabulary caches of g. */
void gr__mcache_free_all(gr_grammar *g);

/* The per-state masks of one DFA state for one vocabulary (gr_mask.c computes them). */
typedef struct gr_smask {
    int n_acc;          /* accepted tokens */
    uint32_t *acc_bits; /* [mask words] when dense, else NULL */
    int32_t *acc_ids;   /* [n_acc] when sparse */
    int n_unc;
    int32_t *unc;       /* [n_unc] uncertain trie nodes, in trie order */
} gr_smask;

/* One vocabulary's cache of a grammar. */
struct gr_mcache {
    const gr_vocab *v;
    gr_smask **st;      /* [n_states] NULL until computed */
    size_t bytes;
    gr_mcache *next;
};

/* Frees one state's masks (NULL is a no-op). */
void gr__smask_free(gr_smask *sm);
/* Bytes the grammar's caches hold, every vocabulary together (under the grammar's lock). */
size_t gr__mcache_bytes(gr_grammar *g);
/* The grammar's cache for vocabulary v, made empty on first use; NULL when out of memory
 * (under the grammar's lock). */
gr_mcache *gr__mcache_of(gr_grammar *g, const gr_vocab *v);

/* ---- DFA steps ---------------------------------------------------------------------------- */

static inline int32_t gr__next(const gr_grammar *g, int32_t s, unsigned char byte)
{
    return g->next[(size_t)s * (size_t)g->n_classes + g->cls[byte]];
}

/* ---- configurations (gr_config.c) ------------------------------------------------------------- */

typedef struct gr_pair {
    int32_t state; /* a state with byte edges */
    int32_t node;  /* stack node (0 = bottom) */
} gr_pair;

/* Interned return stacks: node = (ret state, parent node). Node 0 is the bottom. */
typedef struct gr_snode {
    int32_t ret, parent, depth;
} gr_snode;

typedef struct gr_stacks {
    gr_snode *nodes;
    int n, cap;
    int32_t *hash;  /* open addressing over node ids, -1 empty */
    int hcap;
} gr_stacks;

int gr__stacks_init(gr_stacks *st);
void gr__stacks_fini(gr_stacks *st);
/* The node (ret, parent), created when new; -1 when out of memory or too deep. */
int32_t gr__stacks_push(gr_stacks *st, int32_t ret, int32_t parent);
int gr__stacks_copy(gr_stacks *dst, const gr_stacks *src);
/* Forgets every node but the bottom. */
void gr__stacks_reset(gr_stacks *st);
/* Keeps only the nodes that pairs[0..n_pairs) stand on, renumbered in creation order, and
 * rewrites the pairs' nodes to match. Returns the nodes left, or -ENOMEM (nothing changed). */
int gr__stacks_compact(gr_stacks *st, gr_pair *pairs, int n_pairs);

/* Result flags of a closure / step. */
enum gr_step_flag {
    GR_BOTTOM = 1,   /* some path ended the bottom frame */
    GR_OVERFLOW = 2, /* pairs were dropped (GR_MAX_VISIT) */
};

/* Scratch for building configurations: a visited set of (state, node) pairs. */
typedef struct gr_visit {
    uint64_t *keys;  /* [cap] (state << 32 | node) */
    uint32_t *gen;   /* [cap] an entry is live when gen == cur */
    uint32_t cur;
    int cap;         /* a power of two, grown up to a bound */
    int n;           /* live entries */
} gr_visit;

int gr__visit_init(gr_visit *v, int cap);
void gr__visit_fini(gr_visit *v);

/* A growable array of pairs (configurations are ranges of it). */
typedef struct gr_pairs {
    gr_pair *v;
    int n, cap;
} gr_pairs;

int gr__pairs_reserve(gr_pairs *p, int extra);

/* Appends to out the closure of (state, node): byte-consuming pairs reached through calls and
 * returns. Returns enum gr_step_flag bits, or -ENOMEM. The visited set must have been reset
 * (gr__visit_reset) for the configuration being built; it bounds the configuration to
 * GR_MAX_VISIT entries, so out never grows by more than that in one configuration. */
int gr__closure(const gr_grammar *g, gr_stacks *st, gr_visit *vis, int32_t state, int32_t node,
                gr_pairs *out);
void gr__visit_reset(gr_visit *v);

/* Advances the configuration in[0..n) by one byte into out (appended; in must not point into
 * out's array unless out has room for GR_MAX_VISIT more pairs). Returns flag bits or -ENOMEM. */
int gr__step(const gr_grammar *g, gr_stacks *st, gr_visit *vis, const gr_pair *in, int n,
             unsigned char byte, gr_pairs *out);

/* Scratch of the trie walks (gr_mask.c), one per matcher. */
typedef struct gr_walk {
    gr_stacks st;        /* walk-local stacks: for cache walks the bottom is the unknown caller */
    gr_visit vis;
    gr_pairs arena;      /* the configuration at each depth of the current path */
    int32_t *cfg_off;    /* [depth_cap + 1] start of depth d's configuration in arena */
    int32_t *cfg_n;      /* [depth_cap + 1] its pairs */
    uint8_t *esc;        /* [depth_cap + 1] GR_W_* bits */
    uint32_t *bits;      /* [mask words] scratch token set */
    int32_t *unc;        /* uncertain trie nodes found by a cache walk */
    int n_unc, cap_unc;
    int depth_cap;       /* 0 until first used */
} gr_walk;

struct gr_matcher {
    gr_grammar *g;       /* a reference */
    const gr_vocab *v;   /* borrowed */
    gr_stacks st;        /* the configuration's stacks (and those of runtime walks) */
    gr_visit vis;
    gr_pairs cur;        /* the configuration: cur.v[0 .. cur.n) */
    int accepting;       /* the output so far is complete */
    int terminated;      /* an end-of-generation token was accepted */
    int gc_at;           /* stack nodes at which the next compaction runs */
    gr_walk w;
};

void gr__walk_fini(gr_walk *w);

/* ---- vocabulary (gr_mask.c) ----------------------------------------------------------------- */

/* The vocabulary as a trie in depth-first order: node i consumes byte[i] at depth depth[i]
 * (1-based), its subtree is i .. end[i] - 1, and the tokens whose bytes end exactly there are
 * tok_ids[tok_off[i] .. tok_off[i + 1]). */
struct gr_vocab {
    int n_vocab;
    int n_nodes;
    unsigned char *byte;  /* [n_nodes] */
    int32_t *depth;       /* [n_nodes] */
    int32_t *end;         /* [n_nodes] */
    int32_t *tok_off;     /* [n_nodes + 1] */
    int32_t *tok_ids;     /* token ids grouped by node */
    int max_len;          /* longest token in bytes */
    int32_t *eog;         /* [n_eog] end-of-generation ids */
    int n_eog;
    unsigned char **tok_bytes; /* [n_vocab] each token's bytes (NULL: never allowed) */
    int32_t *tok_len;     /* [n_vocab] */
    int32_t *tok_node;    /* [n_vocab] trie node where the token ends, -1 when none */
};

#endif
