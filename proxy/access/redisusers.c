/* redisusers.c - owns the Redis ACL users sluice keeps with users_in_redis
 * ("sluice:NAME"), their random passwords and logins, and the ACL SETUSER
 * and DELUSER that keep every node in step. It reads the users file only
 * through users.h and sends only through backend.h. */
#include "redisusers.h"

#include <event2/buffer.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "backend.h"
#include "log.h"
#include "respframe.h"
#include "users.h"

/* One Redis user. GONE: its sluice user went (or no longer needs one); it
 * stays, with its login, until redisusers_free, as requests and
 * connections may still point to the login. */
struct redisusers_entry {
    char *name;                  /* the sluice user's */
    struct backend_login login;
    struct evbuffer *setuser;    /* its ACL SETUSER, as sent */
    struct redisusers_entry *next;
};

/* What a reply to one ACL command is about, for its log line. */
struct redisusers_sent {
    char node[280];
    char user[300];
};

static int redisusers_on;
static struct redisusers_entry *redisusers_entries;
static int redisusers_live;
static unsigned long long redisusers_refusals;
static char redisusers_last_refusal[900];

void redisusers_init(int on)
{
    redisusers_on = on;
}

static void redisusers_sent_free(struct request *req)
{
    free(req->ctx);
}

/* Redis's reply to an ACL SETUSER or DELUSER: a refusal (the backend
 * user lacks +acl|setuser, or a right it hands on) is logged and kept
 * for PROXY INFO. */
static void redisusers_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    const struct redisusers_sent *sent = req->ctx;
    char text[300] = {0};

    if (type == REPLY_ERROR) {
        evbuffer_copyout(src, text, len < sizeof(text) - 1 ? len : sizeof(text) - 1);
        text[strcspn(text, "\r\n")] = '\0';
        redisusers_refusals++;
        snprintf(redisusers_last_refusal, sizeof(redisusers_last_refusal), "%s %s: %s",
                 sent->node, sent->user, text + 1);
        log_warning("users_in_redis: backend %s refused to keep Redis user %s: %s (sluice's "
                    "backend user needs +acl|setuser +acl|deluser and every right it hands on)",
                    sent->node, sent->user, text + 1);
    }
    evbuffer_drain(src, len);
    request_free(req);
}

/* Send the command in BYTES (copied) about USER to NODE, when it is up. */
static void redisusers_send(struct backend_node *node, const char *user, struct evbuffer *bytes)
{
    struct redisusers_sent *sent;
    struct evbuffer *buf;

    if (backend_node_retired(node) || !backend_node_up(node))
        return;   /* redisusers_node_up sends them when it comes up */
    sent = calloc(1, sizeof(*sent));
    buf = evbuffer_new();
    if (sent == NULL || buf == NULL) {
        free(sent);
        if (buf != NULL)
            evbuffer_free(buf);
        return;
    }
    snprintf(sent->node, sizeof(sent->node), "%s", backend_node_name(node));
    snprintf(sent->user, sizeof(sent->user), "%s", user);
    evbuffer_add(buf, evbuffer_pullup(bytes, -1), evbuffer_get_length(bytes));
    if (backend_send_internal(backend_pool_conn(node, 0, 2), buf, redisusers_reply, sent,
                              redisusers_sent_free) != 0)
        free(sent);
    evbuffer_free(buf);
}

static void redisusers_send_all(const char *user, struct evbuffer *bytes)
{
    for (struct backend_node *node = backend_node_next(NULL); node != NULL;
         node = backend_node_next(node))
        redisusers_send(node, user, bytes);
}

static struct redisusers_entry *redisusers_find(const char *name)
{
    for (struct redisusers_entry *e = redisusers_entries; e != NULL; e = e->next) {
        if (!e->login.gone && strcmp(e->name, name) == 0)
            return e;
    }
    return NULL;
}

/* A new entry for sluice user NAME, with a random password; NULL on OOM
 * or a name too long for a Redis user of sluice's. */
static struct redisusers_entry *redisusers_add(const char *name)
{
    unsigned char random[32];
    struct redisusers_entry *e;

    if (strlen(name) + sizeof(REDISUSERS_PREFIX) > sizeof(e->login.user)) {
        log_warning("users_in_redis: user name %.40s... is too long for a Redis user", name);
        return NULL;
    }
    if (getrandom(random, sizeof(random), 0) != (ssize_t)sizeof(random) ||
        (e = calloc(1, sizeof(*e))) == NULL)
        return NULL;
    e->name = strdup(name);
    e->setuser = evbuffer_new();
    if (e->name == NULL || e->setuser == NULL) {
        free(e->name);
        if (e->setuser != NULL)
            evbuffer_free(e->setuser);
        free(e);
        return NULL;
    }
    snprintf(e->login.user, sizeof(e->login.user), REDISUSERS_PREFIX "%s", name);
    for (size_t i = 0; i < sizeof(random); i++)
        snprintf(e->login.password + 2 * i, 3, "%02x", random[i]);
    e->next = redisusers_entries;
    redisusers_entries = e;
    return e;
}

/* E's ACL SETUSER for U: on, its password added (another sluice on the
 * same Redis keeps its own), and U's rules replacing the old ones. */
static void redisusers_build(struct redisusers_entry *e, const struct user *u)
{
    struct evbuffer *rules = evbuffer_new();
    int n;

    if (rules == NULL)
        return;
    n = users_redis_rules(u, rules);
    evbuffer_drain(e->setuser, evbuffer_get_length(e->setuser));
    evbuffer_add_printf(e->setuser,
                        "*%d\r\n$3\r\nACL\r\n$7\r\nSETUSER\r\n$%zu\r\n%s\r\n$2\r\non\r\n"
                        "$%zu\r\n>%s\r\n",
                        n + 5, strlen(e->login.user), e->login.user,
                        strlen(e->login.password) + 1, e->login.password);
    evbuffer_add_buffer(e->setuser, rules);
    evbuffer_free(rules);
}

/* Mark E gone (its connections do not come back) and delete its user. */
static void redisusers_drop(struct redisusers_entry *e)
{
    struct evbuffer *del = evbuffer_new();

    e->login.gone = 1;
    redisusers_live--;
    if (del == NULL)
        return;
    evbuffer_add_printf(del, "*3\r\n$3\r\nACL\r\n$7\r\nDELUSER\r\n$%zu\r\n%s\r\n",
                        strlen(e->login.user), e->login.user);
    redisusers_send_all(e->login.user, del);
    evbuffer_free(del);
    log_notice("users_in_redis: Redis user %s deleted", e->login.user);
}

void redisusers_sync(const struct user_set *set)
{
    if (!redisusers_on)
        return;
    for (struct redisusers_entry *e = redisusers_entries; e != NULL; e = e->next) {
        const struct user *u = e->login.gone ? NULL : users_find(set, e->name, strlen(e->name));
        if (!e->login.gone && (u == NULL || !users_scripts_in_redis(u)))
            redisusers_drop(e);
    }
    for (int i = 0; i < users_count(set); i++) {
        const struct user *u = users_at(set, i);
        struct redisusers_entry *e;
        if (!users_scripts_in_redis(u))
            continue;
        e = redisusers_find(users_name(u));
        if (e == NULL && (e = redisusers_add(users_name(u))) != NULL)
            redisusers_live++;
        if (e == NULL)
            continue;
        redisusers_build(e, u);
        redisusers_send_all(e->login.user, e->setuser);
    }
}

void redisusers_node_up(struct backend_node *node)
{
    for (struct redisusers_entry *e = redisusers_entries; e != NULL; e = e->next) {
        if (!e->login.gone)
            redisusers_send(node, e->login.user, e->setuser);
    }
}

const struct backend_login *redisusers_login(const char *name)
{
    const struct redisusers_entry *e = redisusers_on ? redisusers_find(name) : NULL;

    return e != NULL ? &e->login : NULL;
}

void redisusers_write_info(struct evbuffer *out)
{
    evbuffer_add_printf(out, "users_in_redis:%s\r\n", redisusers_on ? "yes" : "no");
    if (!redisusers_on)
        return;
    evbuffer_add_printf(out, "users_in_redis_users:%d\r\nusers_in_redis_refusals:%llu\r\n"
                        "users_in_redis_last_refusal:%s\r\n",
                        redisusers_live, redisusers_refusals, redisusers_last_refusal);
}

void redisusers_free(void)
{
    struct redisusers_entry *e;

    while ((e = redisusers_entries) != NULL) {
        redisusers_entries = e->next;
        explicit_bzero(e->login.password, sizeof(e->login.password));
        evbuffer_free(e->setuser);
        free(e->name);
        free(e);
    }
    redisusers_live = 0;
}
