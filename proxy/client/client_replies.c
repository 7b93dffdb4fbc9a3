/* client_replies.c - owns what comes back from Redis for a client: a
 * request's reply (client_on_reply), the replies and messages of a
 * connection streaming unpaired (pub/sub, MONITOR), RESP3 pushes, a
 * replication tunnel's bytes both ways, and a private connection's loss. These are the client layer's backend
 * operations (struct backend_client_ops). */
#include "client.h"
#include "client_int.h"
#include "client_failover.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "backend.h"
#include "clientid.h"
#include "cluster.h"
#include "cluster_split.h"
#include "commands.h"
#include "config.h"
#include "local.h"
#include "router.h"
#include "log.h"
#include "learn.h"
#include "multi.h"
#include "netio.h"
#include "pause.h"
#include "placement.h"
#include "reply.h"
#include "respframe.h"
#include "server.h"
#include "slowlog.h"
#include "sockaddr.h"
#include "stats.h"
#include "throttle.h"
#include "tls.h"

/* REQ, a WAIT marked by client_wait_offset_reply, has its count (LEN
 * bytes at the head of SRC): it gets an error in its place (through
 * client_on_reply). Returns 0 when out of memory: the reply goes as is. */
static int client_wait_blind_reply(struct request *req, struct evbuffer *src, size_t len)
{
    struct evbuffer *err = evbuffer_new();

    if (err == NULL)
        return 0;
    req->flags &= ~(unsigned)REQ_WAIT_BLIND;
    evbuffer_drain(src, len);
    reply_error(err, "sluice could not give WAIT this client's writes: Redis refused its "
                "SPUBLISH to __sluice__:wait (sluice's backend user needs &__sluice__:wait)");
    client_on_reply(req, err, evbuffer_get_length(err), REPLY_ERROR);
    evbuffer_free(err);
    return 1;
}

void client_on_reply(struct request *req, struct evbuffer *src, size_t len, int type)
{
    struct client *c = req->client;
    /* REQ may be freed below. */
    int reset = (req->flags & (REQ_RESET | REQ_LOGIN_WAIT | REQ_HOLDS_INPUT)) != 0;

    if ((req->flags & REQ_WAIT_BLIND) && type != REPLY_ERROR &&   /* (-BUSY: as it is) */
        client_wait_blind_reply(req, src, len))
        return;
    client_enter(c);
    c->inflight--;
    throttle_request_done(req, len);   /* out of Redis: charged, its slots go back */
    client_apply_session(c, req, type);
    if (type == REPLY_ERROR) {
        STAT_INC(total_error_replies);
        if (req->on_reply == NULL)   /* a hook (LOCK...) decides what its client gets */
            req->flags |= REQ_FAILED;
    }
    if (req->on_reply != NULL) {
        /* A rewritten request (LOCK...): its hook answers or resends it. */
        req->on_reply(req, src, len, type);
    } else if (req->flags & REQ_NOREPLY) {
        evbuffer_drain(src, len);   /* CLIENT REPLY OFF/SKIP */
        client_complete(c, req);
    } else if (req == TAILQ_FIRST(&c->requests)) {
        /* The common case: nothing earlier is waiting, so the bytes go
         * straight from the backend's buffer to the client's. */
        evbuffer_remove_buffer(src, client_output(c), len);
        TAILQ_REMOVE(&c->requests, req, client_link);
        client_note_done(c, req);
        request_free(req);
        client_flush(c);
    } else if (len <= sizeof(req->kept) && req->reply == NULL) {
        /* A small reply that waits for earlier ones stays in the request:
         * no buffer made and freed (in cluster mode, most of a pipeline's
         * replies come before those of an earlier request to another
         * node). The request's own bytes are not needed again. */
        evbuffer_remove(src, req->kept, len);
        req->flags = (req->flags & ~(unsigned)REQ_KEPT) | REQ_REPLY_KEPT;
        req->kept_reply_len = len;
        client_complete(c, req);
    } else {
        req->reply = evbuffer_new();
        evbuffer_remove_buffer(src, req->reply, len);
        client_complete(c, req);
    }
    if (!c->closing && client_check_output_limit(c) == 0) {
        client_try_unstall(c);
        client_check_drained(c);
    }
    if (reset && !c->closing)
        client_unblock(c);   /* blocked by client_send (RESET, a login, BLPOP...): what
                                follows goes on */
    client_leave(c);
}

/* A RESP3 push of LEN bytes at the head of SRC, which Redis sent a client
 * before its HELLO 2 switched it to RESP2 pub/sub, becomes the RESP2 array
 * Redis sends after it ("message", "pmessage", confirmations: bulks and
 * integers either way). Anything else is left as it is. */
static void client_push_as_array(struct evbuffer *src, size_t len)
{
    struct evbuffer_iovec v;

    if (len > 0 && evbuffer_peek(src, 1, NULL, &v, 1) == 1 && v.iov_len > 0 &&
        ((char *)v.iov_base)[0] == '>')
        ((char *)v.iov_base)[0] = '*';
}

void client_on_passthrough(struct client *c, struct evbuffer *src, size_t len)
{
    static const char reset_reply[] = "+RESET\r\n";
    char head[sizeof(reset_reply) - 1];
    int reset = 0;

    client_enter(c);
    if (c->resp == 2)
        client_push_as_array(src, len);
    if (c->fences > 0 && client_fence_back(c, src, len)) {
        client_flush(c);
        client_leave(c);
        return;
    }
    if (!client_is_monitor(c))
        client_note_subscriptions(c, src, len);
    /* In pub/sub mode only RESET answers with a status: the session is
     * back to normal, and replies pair with requests again. */
    if (len == sizeof(head) && c->private_conn != NULL && !client_is_monitor(c) &&
        c->resets_unanswered > 0 &&
        evbuffer_copyout(src, head, len) == (ssize_t)len && memcmp(head, reset_reply, len) == 0) {
        c->resets_unanswered--;
        c->flags &= ~(unsigned)CLIENT_PASSTHROUGH;
        backend_set_passthrough(c->private_conn, 0);
        backend_after_reset(c->private_conn);   /* RESET logged Redis's connection out */
        reset = 1;
        c->subscriptions = c->shard_subscriptions = 0;
        client_reset_session(c);
        throttle_client_changed(c);
    }
    if ((c->flags & CLIENT_REPLY_OFF) && !client_is_pubsub_message(src, len))
        evbuffer_drain(src, len);   /* messages still go, as from Redis 7.0 */
    else
        evbuffer_remove_buffer(src, client_output(c), len);
    if (client_check_output_limit(c) == 0 && reset)
        client_unblock(c);   /* commands after RESET go on, paired again */
    client_leave(c);
}

/* A RESP3 push goes to the client as it comes. Redis writes replies and
 * pushes of one connection in one order; every reply before this push
 * has been paired already, and the replies still in C's queue come after
 * it, so the push goes straight out (client_flush leaves no complete
 * reply at the head of the queue), ahead of anything still waiting. */
int client_on_push(struct client *c, struct request *head, struct evbuffer *src, size_t len)
{
    char kind[CLIENT_PUSH_KIND_SIZE];
    long long count;
    int row, ends;

    client_enter(c);
    client_push_kind(src, len, kind, &count);
    row = client_count_push(c, kind, count);
    ends = client_push_ends(c, head, row);
    /* Even under CLIENT REPLY OFF: Redis 7.0 still sends RESP3 pushes. */
    clientid_push(c, kind, src, len, client_output(c));
    client_check_output_limit(c);
    client_leave(c);
    return ends;
}


void client_on_private_lost(struct client *c)
{
    /* Cluster mode: a private connection that held nothing (blocking
     * commands and transactions that ended) is simply made again when
     * needed; what was in flight on it gets its error or is sent again. */
    if (cluster_enabled() && client_private_idle(c) && !(c->flags & CLIENT_TUNNEL)) {
        if (c->inflight_conn == c->private_conn)
            c->inflight_conn = NULL;
        c->private_conn = NULL;
        return;
    }
    if (client_failover_private_lost(c))
        return;   /* Sentinel mode: it goes on with the new primary */
    /* Its session (database, transaction, subscriptions) is gone with the
     * connection; carrying on elsewhere would silently change meaning. */
    c->private_conn = NULL;
    c->inflight_conn = NULL;
    c->flags |= CLIENT_CLOSE_AFTER_REPLY;
    client_read_off(c);
    /* A tunnel gets it only before Redis sent anything: past that, an
     * error line would land inside the RDB or the stream. */
    if ((c->flags & CLIENT_PASSTHROUGH) ||
        (c->flags & (CLIENT_TUNNEL | CLIENT_TUNNEL_FED)) == CLIENT_TUNNEL)
        reply_error(client_output(c), "backend connection lost");
    client_fences_drop(c);
    client_flush(c);
}

void client_resume(struct client *c)
{
    c->flags &= ~(unsigned)CLIENT_PAUSED;
    client_enter(c);
    if (client_readable(c))
        client_read_on(c);
    client_process_input(c);
    client_leave(c);
}

/* Tunnels. A client that sent SYNC or PSYNC (REQ_TUNNEL) talks to its
 * private connection unparsed from then on, as a replica talks to its
 * primary: the RDB bulk (no CRLF after it), "\n" keepalives, then the
 * replication stream go to it; what it writes (REPLCONF ACK...) goes to
 * Redis. Either side closing closes the other: the connection's end
 * reaches client_on_private_lost, the client's end client_close. */
void client_on_tunnel(struct client *c, struct evbuffer *src)
{
    client_enter(c);
    c->flags |= CLIENT_TUNNEL_FED;
    evbuffer_add_buffer(client_output(c), src);
    if (evbuffer_get_length(c->output) > CLIENT_TUNNEL_HIGH && c->private_conn != NULL &&
        !(c->flags & CLIENT_TUNNEL_HELD)) {
        c->flags |= CLIENT_TUNNEL_HELD;
        backend_hold_reading(c->private_conn, 1);
    }
    client_leave(c);
}

/* What C (a tunnel) wrote goes to its connection as it is; while that is
 * congested C is not read (client_resume goes on). */
void client_tunnel_input(struct client *c, struct evbuffer *in)
{
    struct backend_conn *conn = c->private_conn;

    if (conn == NULL || backend_send_raw(conn, in) != 0) {
        evbuffer_drain(in, evbuffer_get_length(in));   /* it closes: the connection is gone */
        return;
    }
    if (backend_congested(conn) && c->waiting_on == NULL) {
        c->flags |= CLIENT_PAUSED;
        client_read_off(c);
        backend_wait(conn, c);
    }
}
