/*
 * fuzz_request.c — libFuzzer target for the OpenAI request parser (server/openai/openai.c): any
 * bytes as a completions, chat, tokenize or detokenize body must parse or fail cleanly, never crash
 * or leak; accepted requests must satisfy the invariants the server relies on.
 */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/openai/openai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    static const oai_limits lim = {"model", 1000, NULL};
    int which = data[0] & 3;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    oai_error e;
    if (which < 2) {
        oai_request r;
        if (oai_parse(which, body, len, &lim, &r, &e) == 0) {
            assert(r.n >= 1 && r.best_of >= r.n && r.n_stop <= ENGINE_MAX_STOP);
            assert(r.kind == OAI_CHAT ? r.n_msgs > 0 : r.n_prompts > 0);
            for (int i = 0; i < r.n_prompts; i++)
                for (int k = 0; k < r.prompts[i].n_ids; k++)
                    assert(r.prompts[i].ids[k] >= 0 && r.prompts[i].ids[k] < lim.n_vocab);
            for (int i = 0; i < r.sampling.n_logit_bias; i++)
                assert(r.sampling.bias_ids[i] >= 0 && r.sampling.bias_ids[i] < lim.n_vocab);
            oai_request_free(&r);
        } else {
            assert(e.status >= 400 && e.status < 600);
            free(oai_error_json(&e));
        }
    } else {
        oai_tok_request t;
        int rc = which == 2 ? oai_parse_tokenize(body, len, &t, &e)
                            : oai_parse_detokenize(body, len, &lim, &t, &e);
        if (rc == 0) oai_tok_request_free(&t);
    }
    return 0;
}
