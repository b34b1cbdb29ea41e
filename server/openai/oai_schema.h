/*
 * oai_schema.h — JSON Schema → GBNF rules, for structured outputs (response_format json_schema,
 * guided_json, json_schema) and for anyone composing grammars around JSON values (tool calls:
 * see grammar/grammar.h).
 *
 * Supported keywords (draft 2020-12, the subset used in practice): type (a name or a list),
 * properties, required, additionalProperties (bool or schema), items (schema or false),
 * prefixItems, enum, const, anyOf, oneOf (as anyOf: its branches should exclude each other),
 * allOf with one schema, $ref into the same document (#, #/$defs/…, #/definitions/…, any JSON
 * pointer) with $defs / definitions, minItems, maxItems, minLength, maxLength, pattern (JSON
 * Schema search semantics: unanchored unless ^ / $), format (date, time, date-time, uuid, email,
 * ipv4), minimum / maximum / exclusiveMinimum / exclusiveMaximum (exact on integers and on whole
 * bounds of numbers; a fractional bound of a number is rounded inwards). Annotations (title,
 * description, default, examples, $schema, $id, $comment, deprecated, readOnly, writeOnly) are
 * ignored; any other keyword is an error naming it and where it is.
 *
 * The text the grammar produces is always valid for the schema (it may allow less than the
 * schema does):
 *   - properties come in the schema's order, each optional one may be left out; with
 *     properties given and additionalProperties absent, no other key is produced; extra keys
 *     (additionalProperties true or a schema) differ from every declared name;
 *   - whitespace between tokens is nothing, one space, or a newline and up to 20 spaces or
 *     tabs, and nothing follows the root value;
 *   - integers without bounds have at most 16 digits; numbers at most 16 integer and 16
 *     fraction digits and a two-digit exponent (no exponent when bounded);
 *   - strings under a pattern write each character one way (\" \\ and control escapes only).
 */
#ifndef KVSERVE_OAI_SCHEMA_H
#define KVSERVE_OAI_SCHEMA_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* GBNF rules for values matching schema, all named with prefix (e.g. "args-"; "" is fine for a
 * grammar of its own); the value's rule is PREFIX "root". Returns malloc'd text, or NULL with a
 * one-line reason in err (the schema path and what is wrong, e.g. "at properties.age:
 * unsupported keyword 'multipleOf'"). schema is borrowed. */
char *oai_schema_gbnf(const cJSON *schema, const char *prefix, char *err, size_t err_len);

#endif
