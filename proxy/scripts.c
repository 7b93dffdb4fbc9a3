/* scripts.c - owns the table of compiled-in Lua scripts and their SHA1
 * (OpenSSL's libcrypto), and writes the requests that run or load them. */
#include "scripts.h"

#include <event2/buffer.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua_scripts.h"

static struct script *scripts_table;
static int scripts_total;

int scripts_init(void)
{
    unsigned char digest[SHA_DIGEST_LENGTH];

    scripts_total = lua_script_count;
    scripts_table = calloc((size_t)scripts_total + 1, sizeof(*scripts_table));
    if (scripts_table == NULL)
        return -1;
    for (int i = 0; i < scripts_total; i++) {
        struct script *s = &scripts_table[i];
        s->name = lua_scripts[i].name;
        s->body = lua_scripts[i].body;
        SHA1((const unsigned char *)s->body, strlen(s->body), digest);
        for (int b = 0; b < SHA_DIGEST_LENGTH; b++)
            snprintf(s->sha1 + 2 * b, 3, "%02x", digest[b]);
    }
    return 0;
}

const struct script *scripts_find(const char *name)
{
    for (int i = 0; i < scripts_total; i++) {
        if (strcmp(scripts_table[i].name, name) == 0)
            return &scripts_table[i];
    }
    return NULL;
}

int scripts_count(void)
{
    return scripts_total;
}

const struct script *scripts_by_index(int i)
{
    return &scripts_table[i];
}

static void scripts_write_bulk(struct evbuffer *out, const char *ptr, size_t len)
{
    evbuffer_add_printf(out, "$%zu\r\n", len);
    evbuffer_add(out, ptr, len);
    evbuffer_add(out, "\r\n", 2);
}

/* VERB (EVAL or EVALSHA) with the script as body or SHA1. */
static void scripts_write_call(struct evbuffer *out, const char *verb, const char *script,
                               int numkeys, const struct sv *keys, int argc, const struct sv *args)
{
    char num[16];
    int n = snprintf(num, sizeof(num), "%d", numkeys);

    evbuffer_add_printf(out, "*%d\r\n", 3 + numkeys + argc);
    scripts_write_bulk(out, verb, strlen(verb));
    scripts_write_bulk(out, script, strlen(script));
    scripts_write_bulk(out, num, (size_t)n);
    for (int i = 0; i < numkeys; i++)
        scripts_write_bulk(out, keys[i].ptr, keys[i].len);
    for (int i = 0; i < argc; i++)
        scripts_write_bulk(out, args[i].ptr, args[i].len);
}

void scripts_write_evalsha(struct evbuffer *out, const struct script *s, int numkeys,
                           const struct sv *keys, int argc, const struct sv *args)
{
    scripts_write_call(out, "EVALSHA", s->sha1, numkeys, keys, argc, args);
}

void scripts_write_eval(struct evbuffer *out, const struct script *s, int numkeys,
                        const struct sv *keys, int argc, const struct sv *args)
{
    scripts_write_call(out, "EVAL", s->body, numkeys, keys, argc, args);
}

void scripts_write_load(struct evbuffer *out, const struct script *s)
{
    evbuffer_add(out, "*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n", 26);
    scripts_write_bulk(out, s->body, strlen(s->body));
}
