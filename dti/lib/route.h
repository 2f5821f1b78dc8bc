/* libdti layer 3, routing over the PPE's engines (ppe_route.c): the links to
 * every engine, a context's queue pair on each, listener groups (one
 * listening handle over a sibling on every engine), and sockets moved to the
 * engine that owns their flow. It writes the handle table (queue.h: struct
 * dti_alias) and answers a group's waiting accept (a dti__answer_fn). Its
 * set-up calls are blocking round trips on the queues (layer 2); nothing
 * here runs on one engine. Calls queues, link and base. */
#ifndef DTI_LIB_ROUTE_H
#define DTI_LIB_ROUTE_H

#include "queue.h"

/* A listener on a PPE with several engines is a group: the socket the
 * application created plus one sibling listening on each other engine, so a
 * connection is accepted by whichever engine owns its flow. The application
 * sees one handle (`app`); events and accepts of siblings are reported as
 * its own. Process-private: made and dropped in this process. */
struct dti_group {
    dti_sock_t app;                        /* the application's handle */
    uint32_t n;                            /* members, app's own included */
    dti_sock_t member[DTI_MAX_ENGINES];    /* app handles (engine bits set) */
    uint32_t next;                         /* accept round robin */
    /* A waiting accept (DTI_ACCEPT_WAIT) with nothing waiting anywhere waits
     * on every engine; the first answer is the caller's, connections that
     * come with later ones are kept here for the next accept. */
    uint64_t wait_ud;
    struct dti_ctx *wait_ctx;              /* the caller's context */
    uint32_t waiting;                      /* engines (bits) whose member accept is in flight */
    bool wait_done;                        /* the caller has its answer */
    bool dropped;                          /* closed: freed by the last answer */
    uint32_t backlog_len;
    dti_sock_t backlog[DTI_ACCEPT_MAX * DTI_MAX_ENGINES];
};

#pragma GCC visibility push(hidden)

/* Links: engines 1..n-1 attached as links of d (dti_detach() of the caller
 * undoes every link made), and their end. */
int dti__attach_links(struct dti_attachment *d, const char *path, const char *name, uint32_t n_engines,
                      char *why, size_t wl);
void dti__detach_links(struct dti_attachment *d);
/* A context's queue pairs on engines 1..n-1, and their end. */
int dti__ctx_open_subs(struct dti_ctx *c);
void dti__ctx_close_subs(struct dti_ctx *c);

/* Listener groups. */
struct dti_group *dti__group_of(struct dti_attachment *link, dti_sock_t local);
int dti__group_listen(struct dti_ctx *c, dti_sock_t s, int backlog, uint64_t ud);
int dti__group_accept(struct dti_ctx *c, struct dti_group *g, unsigned max, unsigned flags, uint64_t ud);
/* Applies a watch, an option or a shutdown to every sibling (blocking). */
int dti__group_each(struct dti_ctx *c, struct dti_group *g, uint16_t op, uint32_t a0, int64_t v);
int dti__group_drop(struct dti_ctx *c, struct dti_group *g, uint16_t op);
int dti__group_status(struct dti_ctx *c, struct dti_group *g, struct dti_sock_info *out);

/* Moved sockets. A socket bound to a port whose flow to `remote` another
 * engine owns moves there (a new socket with its options and address; the
 * application keeps its handle). 0 when nothing had to move. */
int dti__place_for_connect(struct dti_ctx *c, dti_sock_t s, const struct dti_addr *remote);
/* The same for IPv6 (ip6.c): its flow's owner is dti_flow_owner6's. */
int dti__place_for_connect6(struct dti_ctx *c, dti_sock_t s, const struct dti_addr6 *remote);
/* Whether application handle s moved; forgetting where (it then names its
 * own slot again: the socket left there when it moved). */
bool dti__is_moved(struct dti_ctx *c, dti_sock_t s);
void dti__forget_move(struct dti_ctx *c, dti_sock_t s);
/* CLOSE or ABORT of application handle s (no group handling): on a moved
 * handle, the socket left where the handle was made goes too. */
int dti__prep_release_handle(dti_ctx_t *c, uint16_t op, dti_sock_t s, uint64_t ud);

/* Passing and exec on several engines. The listener group whose
 * application handle is s, or NULL; where handle s moved (DTI_SOCK_INVALID:
 * it did not). */
struct dti_group *dti__group_of_app(struct dti_attachment *d, dti_sock_t s);
dti_sock_t dti__moved_to(struct dti_attachment *d, dti_sock_t s);
/* The engine sockets application handle s stands for, per engine (engine
 * handles, DTI_SOCK_INVALID where none): a listener group's members, the
 * socket a moved handle names, or s. Returns the engine of the
 * application's own socket. */
uint32_t dti__parts_of(struct dti_attachment *d, dti_sock_t s, dti_sock_t part[DTI_MAX_ENGINES]);
/* Makes again, in another process's attachment d, the listener group of
 * application handle app with these members (app handles, app among them;
 * 0 when it exists already), or the move of handle app to socket `to`. */
int dti__group_restore(struct dti_attachment *d, dti_sock_t app, const dti_sock_t *members, uint32_t n);
int dti__move_restore(struct dti_attachment *d, dti_sock_t app, dti_sock_t to);
/* Closes engine socket s (an application handle of one engine, no group
 * handling): a blocking round trip. */
int dti__release_now(struct dti_ctx *c, dti_sock_t s);

#pragma GCC visibility pop

/* The listener group application handle s stands for; NULL on one engine. */
static inline struct dti_group *dti__group_find(struct dti_ctx *c, dti_sock_t s)
{
    if (c->n_sub <= 1)
        return NULL;
    dti_sock_t local = s;
    struct dti_ctx *q = dti__route(c, &local);
    struct dti_group *g = dti__group_of(q->d, local);
    const uint32_t e = dti__engine_of(s);
    if (!g && e < c->n_sub && q->d->engine != e) {
        /* A moved handle listening: its group is kept in the handle's own
         * slot, where dti__group_listen put it. */
        g = dti__group_of(c->sub[e]->d, s & DTI_LOCAL_MASK);
    }
    return g && g->app == s ? g : NULL; /* siblings are the group code's own */
}

#endif
