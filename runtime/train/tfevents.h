/* tfevents.h — TensorBoard event files written by dtrun itself. A file is a
 * sequence of records, each
 *     uint64 length | uint32 masked CRC-32C of the length | data | uint32 masked CRC-32C of data
 * (little-endian; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8), whose data
 * is one tensorflow.Event protobuf, encoded here by hand:
 *     Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
 *     Summary { repeated Value value = 1; }
 *     Value   { string tag = 1; float simple_value = 2; }
 * The first record carries file_version "brain.Event:2"; each scalar is then
 * one Event. Files are named events.out.tfevents.TIME.HOST.PID.0, as
 * TensorBoard's readers look for. */
#ifndef DTRUN_TFEVENTS_H
#define DTRUN_TFEVENTS_H

#include <stddef.h>

typedef struct tfevents tfevents;

/* Creates dir (and its parents) and a new event file in it. NULL + err. */
tfevents *tfevents_open(const char *dir, char *err, size_t errlen);
/* One scalar at a step, stamped with the wall clock. 0, or -1 (a write
 * failed: the writer stops writing and says so once on stderr). */
int tfevents_scalar(tfevents *t, const char *tag, long step, double value);
void tfevents_flush(tfevents *t);
void tfevents_close(tfevents *t);
/* The file's path. */
const char *tfevents_path(const tfevents *t);

#endif
