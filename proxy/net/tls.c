/* tls.c - owns everything OpenSSL: the client-side and backend-side
 * contexts (built whole from the configured files, swapped in only when
 * complete), handshakes, and the encrypted reads and writes. It knows
 * nothing about clients or requests; callers own the sockets. */
#include "tls.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "errlist.h"
#include "log.h"
#include "safefile.h"
#include "stats.h"

/* The most plaintext one TLS record carries: what one SSL_write hands to
 * OpenSSL, and what one SSL_read returns at most. */
#define TLS_RECORD_SIZE (16 * 1024)

struct tls_contexts {
    SSL_CTX *server;    /* tls_listen; NULL without */
    SSL_CTX *backend;   /* backend_tls; NULL without */
};

static struct tls_contexts tls_current;
static const struct config *tls_cfg;
static long tls_clients;   /* SSL objects made by tls_accept_new, not yet closed */

/* OpenSSL's queued errors as one line into BUF (and the queue emptied). */
static void tls_error_text(char *buf, size_t size)
{
    unsigned long code;
    size_t used = 0;

    buf[0] = '\0';
    while ((code = ERR_get_error()) != 0 && used + 2 < size) {
        char one[256];
        ERR_error_string_n(code, one, sizeof(one));
        used += (size_t)snprintf(buf + used, size - used, "%s%s", used > 0 ? "; " : "", one);
    }
    ERR_clear_error();
}

/* Fail with "KEY FILE: WHAT: openssl's reason" in ERR. */
static int tls_fail(char *err, size_t errlen, const char *key, const char *file, const char *what)
{
    char reason[512];

    tls_error_text(reason, sizeof(reason));
    snprintf(err, errlen, "%s %s: %s%s%s", key, file != NULL ? file : "", what,
             reason[0] != '\0' ? ": " : "", reason);
    return -1;
}

/* Versions outside BITS (enum config_tls_protocol) are turned off. */
static void tls_set_protocols(SSL_CTX *ctx, int bits)
{
    static const struct {
        int bit;
        long option;
    } versions[] = {
        {CONFIG_TLS_V1, SSL_OP_NO_TLSv1},
        {CONFIG_TLS_V1_1, SSL_OP_NO_TLSv1_1},
        {CONFIG_TLS_V1_2, SSL_OP_NO_TLSv1_2},
        {CONFIG_TLS_V1_3, SSL_OP_NO_TLSv1_3},
    };

    /* OpenSSL's default minimum (TLS 1.2 on Debian) would hide older ones. */
    SSL_CTX_set_min_proto_version(ctx, TLS1_VERSION);
    for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++) {
        if (!(bits & versions[i].bit))
            SSL_CTX_set_options(ctx, (unsigned long)versions[i].option);
    }
}

/* Load a certificate chain and its key into CTX, checking they match. */
static int tls_load_pair(SSL_CTX *ctx, const char *cert_key, const char *cert,
                         const char *key_key, const char *key, char *err, size_t errlen)
{
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1)
        return tls_fail(err, errlen, cert_key, cert, "cannot load the certificate");
    if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)
        return tls_fail(err, errlen, key_key, key, "cannot load the private key");
    if (SSL_CTX_check_private_key(ctx) != 1)
        return tls_fail(err, errlen, key_key, key, "does not match the certificate");
    return 0;
}

/* Settings both sides share: partial writes, a buffer that may move
 * between an SSL_write and its retry (it lives in an evbuffer), no
 * renegotiation, no compression. */
static SSL_CTX *tls_ctx_new(const SSL_METHOD *method, const struct config *cfg)
{
    SSL_CTX *ctx = SSL_CTX_new(method);

    if (ctx == NULL)
        return NULL;
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
    tls_set_protocols(ctx, cfg->tls_protocols);
    return ctx;
}

static int tls_set_ciphers(SSL_CTX *ctx, const struct config *cfg, char *err, size_t errlen)
{
    if (cfg->tls_ciphers != NULL && SSL_CTX_set_cipher_list(ctx, cfg->tls_ciphers) != 1)
        return tls_fail(err, errlen, "tls_ciphers", cfg->tls_ciphers, "no usable cipher");
    if (cfg->tls_ciphersuites != NULL && SSL_CTX_set_ciphersuites(ctx, cfg->tls_ciphersuites) != 1)
        return tls_fail(err, errlen, "tls_ciphersuites", cfg->tls_ciphersuites,
                        "no usable cipher suite");
    return 0;
}

/* The context for tls_listen: its certificate, the CA that signs client
 * certificates, and whether one is asked for (tls_auth_clients). */
static SSL_CTX *tls_server_ctx(const struct config *cfg, char *err, size_t errlen)
{
    static const unsigned char session_context[] = "sluice";
    SSL_CTX *ctx = tls_ctx_new(TLS_server_method(), cfg);
    int verify = SSL_VERIFY_NONE;

    if (ctx == NULL) {
        tls_fail(err, errlen, "tls_listen", "", "cannot create a TLS context");
        return NULL;
    }
    SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_read_ahead(ctx, 1);   /* one read() a batch of records: see tls_read */
    /* Sessions resumed with a client certificate need an id context. */
    SSL_CTX_set_session_id_context(ctx, session_context, sizeof(session_context) - 1);
    if (tls_load_pair(ctx, "tls_cert_file", cfg->tls_cert_file, "tls_key_file", cfg->tls_key_file,
                      err, errlen) != 0 ||
        tls_set_ciphers(ctx, cfg, err, errlen) != 0)
        goto fail;
    if (cfg->tls_ca_cert_file != NULL) {
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(cfg->tls_ca_cert_file);
        if (SSL_CTX_load_verify_locations(ctx, cfg->tls_ca_cert_file, NULL) != 1 || names == NULL) {
            sk_X509_NAME_pop_free(names, X509_NAME_free);
            tls_fail(err, errlen, "tls_ca_cert_file", cfg->tls_ca_cert_file,
                     "cannot load the CA certificates");
            goto fail;
        }
        SSL_CTX_set_client_CA_list(ctx, names);
    }
    if (cfg->tls_auth_clients == CONFIG_TLS_AUTH_YES)
        verify = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    else if (cfg->tls_auth_clients == CONFIG_TLS_AUTH_OPTIONAL)
        verify = SSL_VERIFY_PEER;
    SSL_CTX_set_verify(ctx, verify, NULL);
    return ctx;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}

/* The context for connections to Redis: the CA that signs Redis's
 * certificate (the system's without backend_tls_ca_cert_file), and a
 * client certificate when Redis asks for one. */
static SSL_CTX *tls_backend_ctx(const struct config *cfg, char *err, size_t errlen)
{
    SSL_CTX *ctx = tls_ctx_new(TLS_client_method(), cfg);

    if (ctx == NULL) {
        tls_fail(err, errlen, "backend_tls", "", "cannot create a TLS context");
        return NULL;
    }
    if (tls_set_ciphers(ctx, cfg, err, errlen) != 0)
        goto fail;
    if (cfg->backend_tls_ca_cert_file != NULL) {
        if (SSL_CTX_load_verify_locations(ctx, cfg->backend_tls_ca_cert_file, NULL) != 1) {
            tls_fail(err, errlen, "backend_tls_ca_cert_file", cfg->backend_tls_ca_cert_file,
                     "cannot load the CA certificates");
            goto fail;
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        tls_fail(err, errlen, "backend_tls", "", "cannot load the system's CA certificates");
        goto fail;
    }
    if (cfg->backend_tls_cert_file != NULL &&
        tls_load_pair(ctx, "backend_tls_cert_file", cfg->backend_tls_cert_file,
                      "backend_tls_key_file", cfg->backend_tls_key_file, err, errlen) != 0)
        goto fail;
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    return ctx;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}

static void tls_contexts_free(struct tls_contexts *t)
{
    SSL_CTX_free(t->server);
    SSL_CTX_free(t->backend);
    t->server = t->backend = NULL;
}

/* Every file the contexts CFG asks for are read from is a regular file of
 * bounded size (safefile.h): OpenSSL would wait on a FIFO and read
 * /dev/zero for ever, on the loop, at a reload. (Checked by name, then
 * opened by OpenSSL: a file swapped in between is the operator's own.)
 * Returns 0, or -1 with "KEY FILE: why" in ERR. */
static int tls_check_files(const struct config *cfg, char *err, size_t errlen)
{
    const int server = cfg->tls_listen_count > 0, backend = cfg->backend_tls || cfg->sentinel_tls;
    const struct { int used; const char *key, *path; } files[] = {
        {server, "tls_cert_file", cfg->tls_cert_file},
        {server, "tls_key_file", cfg->tls_key_file},
        {server, "tls_ca_cert_file", cfg->tls_ca_cert_file},
        {backend, "backend_tls_ca_cert_file", cfg->backend_tls_ca_cert_file},
        {backend, "backend_tls_cert_file", cfg->backend_tls_cert_file},
        {backend, "backend_tls_key_file", cfg->backend_tls_key_file},
    };
    char why[128];

    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        if (files[i].used && files[i].path != NULL &&
            safefile_check(files[i].path, why, sizeof(why)) != 0) {
            snprintf(err, errlen, "%s %s: %s", files[i].key, files[i].path, why);
            return -1;
        }
    }
    return 0;
}

/* Build every context CFG asks for into OUT, whole or not at all. */
static int tls_build(const struct config *cfg, struct tls_contexts *out, char *err, size_t errlen)
{
    out->server = out->backend = NULL;
    ERR_clear_error();
    if (tls_check_files(cfg, err, errlen) != 0)
        return -1;
    if (cfg->tls_listen_count > 0 && (out->server = tls_server_ctx(cfg, err, errlen)) == NULL)
        return -1;
    if ((cfg->backend_tls || cfg->sentinel_tls) && (out->backend = tls_backend_ctx(cfg, err, errlen)) == NULL) {
        tls_contexts_free(out);
        return -1;
    }
    return 0;
}

int tls_init(const struct config *cfg, char *err, size_t errlen)
{
    tls_cfg = cfg;
    return tls_build(cfg, &tls_current, err, errlen);
}

/* Add ERR, tls_build's message, to ERRS as FILE:LINE: the line of the key
 * the message starts with (the key that names the bad file). */
static void tls_add_error(const struct config *cfg, struct errlist *errs, const char *err)
{
    char key[64] = "";

    sscanf(err, "%63s", key);
    errlist_add(errs, cfg->path, config_key_line(cfg, key), "%s", err);
}

int tls_prepare(const struct config *cfg, struct tls_contexts **out, struct errlist *errs)
{
    char err[1024];

    *out = NULL;
    if (cfg->tls_listen_count == 0 && !cfg->backend_tls && !cfg->sentinel_tls)
        return 0;
    *out = calloc(1, sizeof(**out));
    if (*out == NULL || tls_build(cfg, *out, err, sizeof(err)) != 0) {
        if (*out == NULL)
            snprintf(err, sizeof(err), "out of memory");
        free(*out);
        *out = NULL;
        log_warning("TLS certificates not reloaded; the old ones stay: %s", err);
        tls_add_error(cfg, errs, err);
        return -1;
    }
    return 0;
}

void tls_commit(struct tls_contexts *fresh)
{
    if (fresh == NULL)
        return;
    /* SSL objects hold a reference to their context: live connections
     * keep the old one until they end. */
    tls_contexts_free(&tls_current);
    tls_current = *fresh;
    free(fresh);
    log_notice("TLS certificates reloaded");
}

void tls_staged_free(struct tls_contexts *fresh)
{
    if (fresh != NULL)
        tls_contexts_free(fresh);
    free(fresh);
}

int tls_check(const struct config *cfg, struct errlist *errs)
{
    struct tls_contexts built;
    char err[1024];

    if (tls_build(cfg, &built, err, sizeof(err)) != 0) {
        tls_add_error(cfg, errs, err);
        return -1;
    }
    tls_contexts_free(&built);
    return 0;
}

void tls_free(void)
{
    tls_contexts_free(&tls_current);
}

SSL *tls_accept_new(int fd)
{
    SSL *ssl;

    if (tls_current.server == NULL || (ssl = SSL_new(tls_current.server)) == NULL)
        return NULL;
    if (SSL_set_fd(ssl, fd) != 1) {
        SSL_free(ssl);
        return NULL;
    }
    SSL_set_accept_state(ssl);
    tls_clients++;
    return ssl;
}

void tls_close(SSL *ssl)
{
    if (ssl == NULL)
        return;
    /* One close_notify if the session is up; no waiting for the peer's. */
    if (SSL_is_init_finished(ssl)) {
        ERR_clear_error();
        SSL_shutdown(ssl);
    }
    ERR_clear_error();
    SSL_free(ssl);
    tls_clients--;
}

int tls_handshake(SSL *ssl, int *want_write)
{
    char reason[512];
    int rc, code;

    ERR_clear_error();
    rc = SSL_do_handshake(ssl);
    if (rc == 1)
        return 1;
    code = SSL_get_error(ssl, rc);
    if (code == SSL_ERROR_WANT_READ || code == SSL_ERROR_WANT_WRITE) {
        *want_write = code == SSL_ERROR_WANT_WRITE;
        return 0;
    }
    STAT_INC(tls_handshake_failures);
    tls_error_text(reason, sizeof(reason));
    log_info("TLS handshake failed: %s", reason[0] != '\0' ? reason : "connection closed");
    return -1;
}

/* With read-ahead (tls_server_ctx), one read() takes whatever the
 * socket has into SSL's buffer, and records are decrypted from there.
 * Up to MAX, what is left in that buffer is read too; past MAX it stays
 * (tls_buffered tells the caller to come back: the socket's read event
 * cannot see it). Reading also goes on after a full record (a large value
 * is coming); after a small one the socket is most likely drained, and
 * asking again would cost a read() that finds nothing, on every request. */
long tls_read(SSL *ssl, struct evbuffer *in, size_t max)
{
    char buf[TLS_RECORD_SIZE];
    size_t total = 0;
    int n = 0;

    ERR_clear_error();
    while (total == 0 || SSL_pending(ssl) > 0 ||
           (total < max && (SSL_has_pending(ssl) || n == (int)sizeof(buf)))) {
        n = SSL_read(ssl, buf, sizeof(buf));
        if (n <= 0) {
            int code = SSL_get_error(ssl, n);
            if (total > 0)
                return (long)total;   /* what ends the reads shows on the next one */
            if (code == SSL_ERROR_WANT_READ || code == SSL_ERROR_WANT_WRITE)
                return -2;
            if (code == SSL_ERROR_ZERO_RETURN)
                return 0;
            /* A peer gone without close_notify is an end of file too. */
            if (code == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)
                return 0;
            ERR_clear_error();
            return -1;
        }
        if (evbuffer_add(in, buf, (size_t)n) != 0)
            return -1;
        total += (size_t)n;
    }
    return (long)total;
}

int tls_write(SSL *ssl, struct evbuffer *out)
{
    size_t len;

    ERR_clear_error();
    while ((len = evbuffer_get_length(out)) > 0) {
        /* Never fewer bytes than a write that must be retried offered:
         * the output only grows until a write succeeds. */
        int n = len < TLS_RECORD_SIZE ? (int)len : TLS_RECORD_SIZE;
        unsigned char *p = evbuffer_pullup(out, n);
        int rc = SSL_write(ssl, p, n);
        if (rc <= 0) {
            int code = SSL_get_error(ssl, rc);
            if (code == SSL_ERROR_WANT_WRITE || code == SSL_ERROR_WANT_READ)
                return 0;
            ERR_clear_error();
            return -1;
        }
        evbuffer_drain(out, (size_t)rc);
    }
    return 1;
}

int tls_buffered(const SSL *ssl)
{
    return SSL_has_pending(ssl);
}

int tls_wants_write(const SSL *ssl)
{
    return SSL_want_write(ssl);
}

int tls_wants_read(const SSL *ssl)
{
    return SSL_want_read(ssl);
}

struct bufferevent *tls_backend_bev(struct event_base *base)
{
    const char *name = tls_cfg->backend_tls_server_name;
    struct bufferevent *bev;
    SSL *ssl;

    if (tls_current.backend == NULL || (ssl = SSL_new(tls_current.backend)) == NULL)
        return NULL;
    if (name != NULL && (SSL_set_tlsext_host_name(ssl, name) != 1 || SSL_set1_host(ssl, name) != 1)) {
        SSL_free(ssl);
        return NULL;
    }
    bev = bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
                                         BEV_OPT_CLOSE_ON_FREE);
    if (bev == NULL) {
        SSL_free(ssl);
        return NULL;
    }
    bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    return bev;
}

void tls_bev_error(struct bufferevent *bev, char *buf, size_t size)
{
    unsigned long code = bufferevent_get_openssl_error(bev);
    SSL *ssl = bufferevent_openssl_get_ssl(bev);
    long verify = ssl != NULL ? SSL_get_verify_result(ssl) : X509_V_OK;

    buf[0] = '\0';
    if (code != 0)
        ERR_error_string_n(code, buf, size);
    if (verify != X509_V_OK) {
        size_t used = strlen(buf);
        snprintf(buf + used, size - used, "%scertificate: %s", used > 0 ? "; " : "",
                 X509_verify_cert_error_string(verify));
    }
    while (bufferevent_get_openssl_error(bev) != 0)
        ;
}

void tls_write_info(struct evbuffer *out)
{
    evbuffer_add_printf(out, "tls_listeners:%d\r\ntls_connected_clients:%ld\r\n"
                             "tls_backend:%s\r\n",
                        tls_cfg != NULL ? tls_cfg->tls_listen_count : 0, tls_clients,
                        tls_cfg != NULL && tls_cfg->backend_tls ? "yes" : "no");
}
