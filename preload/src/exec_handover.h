/* The exec handover's writer and its adoption in the new image
 * (exec_handover.c; the reader of the handover is exec_state.c). */
#ifndef ETA_PRELOAD_EXEC_HANDOVER_H
#define ETA_PRELOAD_EXEC_HANDOVER_H

/* In the constructor: adopts the sockets the previous image handed over
 * (ETA_EXEC_STATE), if any; warns once and goes on without them when the
 * handover is stale or forged. */
void eta_exec_adopt(void);
/* In a vfork child, descriptor fd now names what `from` names (-1: nothing
 * of ours: closed); its exec hands over what these notes say. */
void eta_vfork_note(int fd, int from);

#endif
