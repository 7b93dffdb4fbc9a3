/* tls.h - TLS with OpenSSL: the contexts built from the configured
 * certificates (at start and on reload), client handshakes, and the
 * encrypted reads and writes netio.c branches to for a connection with an
 * SSL object. Backend connections get an OpenSSL bufferevent. */
#ifndef SLUICE_TLS_H
#define SLUICE_TLS_H

#include <stddef.h>

struct bufferevent;
struct config;
struct errlist;
struct event_base;
struct evbuffer;
struct ssl_st;

/* Build the contexts CFG asks for (client side when it has tls_listen,
 * backend side with backend_tls). Returns 0, or -1 with ERR set. */
int tls_init(const struct config *cfg, char *err, size_t errlen);
/* SIGHUP / PROXY RELOAD, in two halves. tls_prepare builds the contexts
 * CFG (the next config) asks for into *OUT (NULL when it asks for none),
 * changing nothing: 0, or -1 with the error in ERRS (FILE:LINE: the line
 * of the key naming the bad file). tls_commit makes FRESH (from
 * tls_prepare, taken; NULL: nothing) the contexts of new connections;
 * connections made before keep the context they started with.
 * tls_staged_free drops FRESH instead. */
struct tls_contexts;
int tls_prepare(const struct config *cfg, struct tls_contexts **out, struct errlist *errs);
void tls_commit(struct tls_contexts *fresh);
void tls_staged_free(struct tls_contexts *fresh);
/* sluice -t: build the contexts once, errors into ERRS as FILE:LINE (the
 * line of the key naming the bad file). Returns 0 when fine. */
int tls_check(const struct config *cfg, struct errlist *errs);
void tls_free(void);

/* A server-side SSL object for the accepted socket FD, in accept state.
 * NULL when it cannot be made. Counted as a TLS client until tls_close. */
struct ssl_st *tls_accept_new(int fd);
/* Free SSL (sending close_notify when the session is up, never waiting). */
void tls_close(struct ssl_st *ssl);

/* Go on with SSL's handshake. Returns 1 when done, 0 when it waits for
 * the socket (*WANT_WRITE: writable, else readable), -1 when it failed
 * (counted and logged at info level; the connection must be closed). */
int tls_handshake(struct ssl_st *ssl, int *want_write);

/* As netio_read and netio_write, through SSL. tls_read reads whatever SSL
 * holds decrypted, even past MAX, so that nothing waits inside SSL where
 * the socket's read event cannot see it. tls_wants_write: the last read
 * or write stopped until the socket is writable; tls_wants_read: until
 * it is readable. */
long tls_read(struct ssl_st *ssl, struct evbuffer *in, size_t max);
int tls_write(struct ssl_st *ssl, struct evbuffer *out);
int tls_wants_write(const struct ssl_st *ssl);
/* SSL holds bytes read from the socket that tls_read has not returned
 * (it stopped at MAX): read again without waiting for the socket. */
int tls_buffered(const struct ssl_st *ssl);
int tls_wants_read(const struct ssl_st *ssl);

/* A bufferevent that connects to Redis with TLS (backend_tls): used as
 * bufferevent_socket_new's would be, BEV_EVENT_CONNECTED once the
 * handshake is done. NULL on failure. */
struct bufferevent *tls_backend_bev(struct event_base *base);
/* Why BEV's TLS failed, for the log ("" when OpenSSL said nothing). */
void tls_bev_error(struct bufferevent *bev, char *buf, size_t size);

/* "# TLS" lines of PROXY INFO. */
void tls_write_info(struct evbuffer *out);

#endif
