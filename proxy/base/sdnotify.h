/* sdnotify.h - systemd's readiness protocol (sd_notify(3)), written from
 * its documented socket protocol: no libsystemd. */
#ifndef SLUICE_SDNOTIFY_H
#define SLUICE_SDNOTIFY_H

/* Send STATE ("READY=1", "STOPPING=1", lines joined by '\n') as one
 * datagram to $NOTIFY_SOCKET. Without that variable (not started by
 * systemd with Type=notify) nothing is sent. Returns 0, or -1 when the
 * socket could not be reached (logged at debug level: systemd goes on). */
int sdnotify_send(const char *state);

/* The same with a formatted STATE. */
int sdnotify_sendf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
