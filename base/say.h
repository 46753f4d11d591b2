// SPDX-License-Identifier: MIT
/*
 * What tandem says on stderr, and the detail of a refusal (tdm_error_detail, tandem.h).
 *
 * Every refusal of a configuration field or an environment variable goes through tdm__refuse:
 * it names the field or variable and its value, keeps that text as the calling thread's detail,
 * and writes it to stderr once per cause (the text) and process ("tandem: TANDEM_GPU=bogus: not one
 * of cuda, sim, none (tdm_gpu_create returns -EINVAL)"). A public call that may refuse so calls
 * tdm__detail_begin first: its name goes into the text, and the thread's detail is cleared.
 * tdm__say writes a line every time it is called (tdm_gpu_destroy's waits).
 */
#ifndef TDM_BASE_SAY_H
#define TDM_BASE_SAY_H

/* The public call now running on this thread (a string literal: "tdm_gpu_create"), whose
 * refusals tdm__refuse describes; clears the thread's detail. */
void tdm__detail_begin(const char *call);

/*
 * A refusal: err (a negative errno) with a text that names the field or variable and its value,
 * and why ("TANDEM_GPU=bogus: not one of cuda, sim, none"). The thread's detail becomes the
 * text and "(CALL returns -ENAME)", and stderr gets "tandem: " and the detail, unless the same
 * text (whatever the call) went there before in this process. err 0: a value ignored rather than
 * refused: stderr only (once), the detail untouched. Returns err.
 */
int tdm__refuse(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "tandem: " and the text, one line on stderr, every time. */
void tdm__say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* TDM_BASE_SAY_H */
