/* lockack.c - owns grants and renewals that replicas must acknowledge
 * (ACKS, lock_replica_acks): the script and a WAIT on a one-shot
 * connection to the lock's primary, their two replies, and giving back a
 * grant too few replicas acknowledged or nobody waits for any more. How
 * the client is answered is lock.c's, through the lockack_done_fn it
 * hands down; nothing here calls lock.c.
 *
 *   one-shot connection: EVAL lock_acquire ... n   -> {1,..} | {0,pttl} | -NOREPLICAS
 *                        WAIT n timeout            -> :acked
 *   on WAIT's reply: granted and acked >= n -> answered; granted, fewer ->
 *   given back (owner-checked) and -NOREPLICAS. WAIT counts the writes of
 *   its own connection: the script goes on the same one, and no other
 *   client's commands wait behind it.
 *   n = all: the script counts the replicas online (at least one) and
 *   returns the count; WAIT for that many goes once its reply is in.
 */
#include "lock_int.h"

#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cluster.h"
#include "config.h"
#include "reply.h"
#include "request.h"
#include "server.h"

/* A grant or renewal waiting for its replicas (lockack_send). */
struct lock_ack {
    struct lock_op *op;       /* NULL once OP is gone (its client closed) */
    lockack_done_fn *done_fn; /* answers OP */
    int out;                  /* its requests not yet freed (script, WAIT) */
    int done;
    int type;                 /* the script's reply type; 0: none came */
    int nvals;
    long long vals[4];
    long long need;           /* CONFIG_ACKS_ALL until the script said how many */
    struct backend_conn *conn;   /* the one-shot connection (its WAIT may follow later) */
    char text[160];           /* the script's reply, first line */
    enum lock_verb verb;
    int explicit_owner;
    size_t keylen, toklen;
    char bytes[];             /* key, then token: to give a grant back when OP is gone */
};

/* Both replies of ACK came (ACKED: WAIT's count, -1 when it failed):
 * give back a grant too few replicas acknowledged or nobody waits for,
 * and hand the outcome to its op, if it is still there. */
static void lockack_done(struct lock_ack *ack, long long acked)
{
    struct lock_op *op = ack->op;
    struct lockack_result result;
    const char *token = ack->bytes + ack->keylen;
    int granted = ack->verb == LOCK_ACQUIRE ? ack->type == REPLY_ARRAY && ack->nvals >= 1 &&
                                                  ack->vals[0] == 1
                                            : ack->type == REPLY_STATUS;
    int enough = ack->need != CONFIG_ACKS_ALL && acked >= ack->need;

    ack->done = 1;
    if (op != NULL) {
        op->ack = NULL;
        op->inflight = 0;
    }
    int refused = strncmp(ack->text, "-NOREPLICAS", 11) == 0;

    /* Too few acknowledgements: a grant is given back (one hold), a
     * renewal's lock wholly, also one the script refused to renew: the
     * reply says "not held", and its holder must take it as lost. */
    if ((granted && (!enough || (op == NULL && ack->verb == LOCK_ACQUIRE && !ack->explicit_owner))) ||
        (refused && ack->verb == LOCK_RENEW))
        lockheld_give_back(ack->bytes, ack->keylen, token, ack->toklen,
                           ack->verb == LOCK_RENEW || (op == NULL && !ack->explicit_owner));
    if (op == NULL)
        return;
    result = (struct lockack_result){granted, enough, refused, ack->type, ack->nvals, ack->vals,
                                     ack->need, ack->text};
    ack->done_fn(op, &result);
}

static void lockack_ctx_free(struct request *req)
{
    struct lock_ack *ack = req->ctx;

    req->ctx = NULL;
    if (--ack->out > 0)
        return;
    if (!ack->done)
        lockack_done(ack, -1);   /* freed unanswered (its connection could not send) */
    free(ack);
}

static void lockack_wait_reply(struct request *req, struct evbuffer *src, size_t len, int type);

/* Send "WAIT n timeout" for ACK on CONN (ACK->out counts it already). */
static void lockack_send_wait(struct lock_ack *ack, struct backend_conn *conn)
{
    struct evbuffer *buf = evbuffer_new();
    char n[24], t[24];
    int nlen = snprintf(n, sizeof(n), "%lld", ack->need);
    int tlen = snprintf(t, sizeof(t), "%lld", server.cfg.lock_replica_timeout_ms);

    evbuffer_add_printf(buf, "*3\r\n$4\r\nWAIT\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", nlen, n, tlen,
                        t);
    backend_send_internal(conn, buf, lockack_wait_reply, ack, lockack_ctx_free);
    evbuffer_free(buf);
}

/* ACKS all, the script's reply in ACK: granted, it said how many replicas
 * were online (a fourth value; RENEW: "+OK n"); WAIT for all of them on
 * the same connection (still open: the script's reply is being handed
 * over). Not granted: nothing to wait for (lockack_ctx_free answers). */
static void lockack_wait_all(struct lock_ack *ack)
{
    long long online = -1;

    if (ack->verb == LOCK_ACQUIRE && ack->type == REPLY_ARRAY && ack->nvals >= 4 &&
        ack->vals[0] == 1)
        online = ack->vals[3];
    else if (ack->verb == LOCK_RENEW && ack->type == REPLY_STATUS &&
             sscanf(ack->text, "+OK %lld", &online) != 1)
        online = -1;
    if (online < 1)
        return;
    ack->need = online;
    ack->out++;
    lockack_send_wait(ack, ack->conn);
}

static void lockack_script_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct lock_ack *ack = req->ctx;
    char buf[160];
    size_t n = len < sizeof(buf) - 1 ? len : sizeof(buf) - 1;

    evbuffer_remove(src, buf, n);
    evbuffer_drain(src, len - n);
    buf[n] = '\0';
    ack->type = type;
    if (type == REPLY_ARRAY)
        ack->nvals = reply_parse_ints(buf, n, ack->vals, 4);
    memcpy(ack->text, buf, strcspn(buf, "\r\n"));
    if (ack->need == CONFIG_ACKS_ALL)
        lockack_wait_all(ack);
    request_free(req);
}

static void lockack_wait_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct lock_ack *ack = req->ctx;
    char buf[32];
    size_t n = len < sizeof(buf) - 1 ? len : sizeof(buf) - 1;
    long long acked = -1;

    evbuffer_remove(src, buf, n);
    evbuffer_drain(src, len - n);
    buf[n] = '\0';
    if (type != REPLY_INTEGER || reply_parse_ints(buf, n, &acked, 1) != 1)
        acked = -1;
    lockack_done(ack, acked);
    request_free(req);
}

int lockack_send(struct lock_op *op, long long need, struct evbuffer *script,
                 lockack_done_fn *done)
{
    struct backend_node *node = cluster_enabled() ? cluster_node_for_slot(op->req->slot)
                                                  : backend_default_node();
    struct backend_conn *conn = node != NULL ? backend_control_conn(node, NULL) : NULL;
    struct lock_ack *ack;

    if (conn == NULL)
        return -1;
    ack = calloc(1, sizeof(*ack) + op->keylen + op->toklen);
    ack->op = op;
    ack->done_fn = done;
    ack->need = need;
    ack->verb = op->verb;
    ack->explicit_owner = op->explicit_owner;
    ack->keylen = op->keylen;
    ack->toklen = op->toklen;
    memcpy(ack->bytes, op->key, op->keylen);
    memcpy(ack->bytes + op->keylen, op->token, op->toklen);
    ack->conn = conn;
    ack->out = need != CONFIG_ACKS_ALL ? 2 : 1;   /* the script, and its WAIT when sent now */
    op->ack = ack;
    op->inflight = 1;
    backend_send_internal(conn, script, lockack_script_reply, ack, lockack_ctx_free);
    /* A count: its WAIT goes at once, behind the script. */
    if (need != CONFIG_ACKS_ALL)
        lockack_send_wait(ack, conn);
    return 0;
}

void lockack_orphan(struct lock_ack *ack)
{
    ack->op = NULL;
}
