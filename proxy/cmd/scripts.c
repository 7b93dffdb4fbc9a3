/* scripts.c - owns the table of compiled-in Lua scripts and their SHA1
 * (OpenSSL's libcrypto), and writes the requests that run or load them. */
#include "scripts.h"

#include <event2/buffer.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua_scripts.h"
#include "reply.h"

static struct script *scripts_table;
static int scripts_total;

static char *scripts_put_bulk(char *p, const char *ptr, size_t len);

/* Render "VERB SCRIPT" as two RESP bulks at OUT (room for both plus 64). */
static size_t scripts_render_head(char *out, const char *verb, const char *script)
{
    char *p = scripts_put_bulk(out, verb, strlen(verb));

    return (size_t)(scripts_put_bulk(p, script, strlen(script)) - out);
}

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
        s->evalsha_head_len = scripts_render_head(s->evalsha_head, "EVALSHA", s->sha1);
        s->eval_head = malloc(strlen(s->body) + 64);
        if (s->eval_head == NULL)
            return -1;
        s->eval_head_len = scripts_render_head(s->eval_head, "EVAL", s->body);
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

/* Append "<type><n>\r\n" at P (room for 24 bytes); returns the new end. */
static char *scripts_put_header(char *p, char type, size_t n)
{
    return p + reply_format_header(p, type, (long long)n);
}

/* Append the bulk string PTR/LEN at P (which has room); returns the end. */
static char *scripts_put_bulk(char *p, const char *ptr, size_t len)
{
    p = scripts_put_header(p, '$', len);
    memcpy(p, ptr, len);
    p += len;
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

/* A call whose first two arguments (verb, and script or SHA1) are HEAD,
 * already in RESP. Built in one piece on the stack when it fits (every
 * EVALSHA sluice sends does), so the lock and bucket paths make one
 * evbuffer_add and no printf. */
static void scripts_write_call(struct evbuffer *out, const char *head, size_t headlen,
                               int numkeys, const struct sv *keys, int argc, const struct sv *args)
{
    char num[24], buf[1024], *p = buf;
    int n = reply_format_ll(num, numkeys);
    size_t need = 2 * 32 + headlen + (size_t)n;   /* 32: a header */

    for (int i = 0; i < numkeys; i++)
        need += keys[i].len + 32;
    for (int i = 0; i < argc; i++)
        need += args[i].len + 32;
    if (need > sizeof(buf)) {
        char first[32];
        evbuffer_add(out, first,
                     (size_t)(scripts_put_header(first, '*', (size_t)(3 + numkeys + argc)) - first));
        evbuffer_add(out, head, headlen);
        reply_bulk(out, num, (size_t)n);
        for (int i = 0; i < numkeys; i++)
            reply_bulk(out, keys[i].ptr, keys[i].len);
        for (int i = 0; i < argc; i++)
            reply_bulk(out, args[i].ptr, args[i].len);
        return;
    }
    p = scripts_put_header(p, '*', (size_t)(3 + numkeys + argc));
    memcpy(p, head, headlen);
    p += headlen;
    p = scripts_put_bulk(p, num, (size_t)n);
    for (int i = 0; i < numkeys; i++)
        p = scripts_put_bulk(p, keys[i].ptr, keys[i].len);
    for (int i = 0; i < argc; i++)
        p = scripts_put_bulk(p, args[i].ptr, args[i].len);
    evbuffer_add(out, buf, (size_t)(p - buf));
}

void scripts_write_evalsha(struct evbuffer *out, const struct script *s, int numkeys,
                           const struct sv *keys, int argc, const struct sv *args)
{
    scripts_write_call(out, s->evalsha_head, s->evalsha_head_len, numkeys, keys, argc, args);
}

void scripts_write_eval(struct evbuffer *out, const struct script *s, int numkeys,
                        const struct sv *keys, int argc, const struct sv *args)
{
    scripts_write_call(out, s->eval_head, s->eval_head_len, numkeys, keys, argc, args);
}

void scripts_write_load(struct evbuffer *out, const struct script *s)
{
    evbuffer_add(out, "*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n", 26);
    reply_bulk(out, s->body, strlen(s->body));
}
