// SPDX-License-Identifier: MIT
/*
 * The observers behind base/observe.h: NVTX v3 (header-only, from the CUDA toolkit), in a domain
 * "tandem", for Nsight Systems or any NVTX tool, and tandem's own trace (base/trace.c), which
 * tdm_trace_start turns on (docs/design/observe.md).
 *
 * How a tool attaches: NVTX loads the library named by NVTX_INJECTION64_PATH at its first call
 * and hands it the table of NVTX's function pointers; Nsight Systems sets that variable in the
 * programs it starts. tdm__observe_init looks at the same variable, once per process: unset or
 * empty, tdm__obs stays 0, no NVTX function is ever called and every hook costs its caller one
 * relaxed load and a branch. Set, it creates the domain, which makes NVTX load the tool, and
 * turns the hooks on only if the tool took the domain (a non-NULL handle): a path that fails to
 * load leaves them off too. (A tool linked in statically, NVTX's InitializeInjectionNvtx2_fnptr,
 * is not looked for: tandem's ranges need the variable.)
 *
 * Built without the NVTX header (TANDEM_HAVE_NVTX unset), the NVTX half is empty and only the
 * trace can turn the hooks on.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "observe.h"
#include "symtab.h"
#include "tandem.h"

/* TDM__OBS_NVTX: set once, by a release store in init_once. TDM__OBS_TRACE: set and cleared by
 * tdm_trace_start and tdm_trace_stop (release RMWs, base/trace.c). TDM__OBS_METRICS: set and
 * cleared by tdm__observe_metrics (release RMWs). Read relaxed by tdm__observing(), acquire by
 * the hooks here (nvtx_on, and the trace bit in the run hooks). */
_Atomic unsigned tdm__obs;

/*
 * Layers whose metrics are on, process-wide. The count and the bit change together under the
 * lock: two layers turning theirs on and off at once must not leave the bit clear while one is
 * on (an atomic count alone would let the last one off clear it after the next one on set it).
 */
static pthread_mutex_t metrics_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned metrics_layers; /* metrics_lock */

void tdm__observe_metrics(bool on)
{
	pthread_mutex_lock(&metrics_lock);
	if (on && metrics_layers++ == 0) {
		/* Release, as the other bits are set: a hook that loads tdm__obs with acquire and
		 * sees the bit sees what came before. The metrics' own state is not published
		 * through it: their hooks go on to tdm__metrics_on and the layer's own
		 * acquire loads (gpu/metrics.c), so this bit is a hint that lets them skip that. */
		atomic_fetch_or_explicit(&tdm__obs, TDM__OBS_METRICS, memory_order_release);
	} else if (!on && metrics_layers > 0 && --metrics_layers == 0) {
		/* Release: as the set above; a hook that still sees the bit asks its layer, which
		 * says off. */
		atomic_fetch_and_explicit(&tdm__obs, ~(unsigned)TDM__OBS_METRICS,
		                          memory_order_release);
	}
	pthread_mutex_unlock(&metrics_lock);
}

/*
 * Task names: one slot per task function seen, shared by all threads, filled once. A run looks
 * its function up here (a hash and one or two loads) and passes the name NVTX registered for it,
 * so a tool receives each name's text once, not once per run; dladdr, which takes a lock and walks
 * the symbol tables (microseconds), runs once per function per process. The trace looks its
 * spans' names up here when it writes its file. The table is static: nothing is allocated, so
 * nothing is freed, and its pages are untouched while nothing observes.
 */
#define NAME_SLOTS 256u /* a power of two; distinct task functions of a program */
#define NAME_PROBES 8u  /* slots looked at before a name falls back to "task" */
#define NAME_LEN 64

struct name_slot {
	_Atomic uintptr_t fn; /* claimed once (CAS from 0), never given back */
	_Atomic int ready;    /* release store after name and text are written */
	void *name;           /* the NVTX registered string (nvtxStringHandle_t), or NULL */
	uint32_t color;
	char text[NAME_LEN];
};

static struct name_slot names[NAME_SLOTS];

/* Task colours in the timeline: one per function, from its address. */
static const uint32_t palette[] = {0xFF1F77B4, 0xFFFF7F0E, 0xFF2CA02C, 0xFF9467BD,
                                   0xFF8C564B, 0xFFE377C2, 0xFF17BECF, 0xFFBCBD22};

static uint32_t hash_fn(uintptr_t fn)
{
	return (uint32_t)((fn * 0x9E3779B97F4A7C15ull) >> 40);
}

/*
 * A function's name: its symbol where dladdr finds one (functions of shared libraries, and of a
 * program linked with -rdynamic), else its symbol in its object's .symtab (static functions,
 * and a program's own without -rdynamic: base/symtab.c), else "module+0xoffset" (addr2line -e
 * module reads it back), else its address.
 */
static void name_of(uintptr_t fn, char *out, size_t len)
{
	Dl_info info;
	if (dladdr((void *)fn, &info) != 0) {
		if (info.dli_sname != NULL && info.dli_saddr == (void *)fn) {
			snprintf(out, len, "%s", info.dli_sname);
			return;
		}
		if (tdm__symtab_name(fn, out, len))
			return;
		if (info.dli_fname != NULL && info.dli_fname[0] != '\0') {
			const char *base = strrchr(info.dli_fname, '/');
			snprintf(out, len, "%s+0x%lx", base != NULL ? base + 1 : info.dli_fname,
			         (unsigned long)(fn - (uintptr_t)info.dli_fbase));
			return;
		}
	}
	snprintf(out, len, "task 0x%lx", (unsigned long)fn);
}

static void *nvtx_register(const char *text);

/* A name cut at NAME_LEN may end inside a UTF-8 character: that partial character goes (the
 * trace is JSON, which must be valid UTF-8). */
static void utf8_trim(char *text)
{
	size_t n = strlen(text), i = n;
	while (i > 0 && ((unsigned char)text[i - 1] & 0xC0) == 0x80)
		i--; /* continuation bytes */
	if (i == 0)
		return;
	unsigned char lead = (unsigned char)text[i - 1];
	size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
	if (n - (i - 1) < want)
		text[i - 1] = '\0';
}

/*
 * The slot of fn, filled: claimed and filled here (with `given`, or fn's symbol when NULL;
 * *claimed true), or found claimed by another call, waiting for that one to fill it; NULL when
 * the table is full.
 */
static const struct name_slot *slot_of(uintptr_t fn, const char *given, bool *claimed)
{
	uint32_t h = hash_fn(fn);
	*claimed = false;
	for (uint32_t i = 0; i < NAME_PROBES; i++) {
		struct name_slot *s = &names[(h + i) & (NAME_SLOTS - 1)];
		/* Relaxed, load and claim: the key alone; what goes with it is published by
		 * ready. */
		uintptr_t seen = atomic_load_explicit(&s->fn, memory_order_relaxed);
		if (seen == 0 &&
		    atomic_compare_exchange_strong_explicit(&s->fn, &seen, fn, memory_order_relaxed,
		                                            memory_order_relaxed)) {
			if (given != NULL) {
				snprintf(s->text, sizeof(s->text), "%s", given);
				utf8_trim(s->text);
			} else {
				name_of(fn, s->text, sizeof(s->text));
			}
			s->name = nvtx_register(s->text);
			s->color = palette[h % (sizeof(palette) / sizeof(palette[0]))];
			/* Release: pairs with the acquire load below; name, colour and text are
			 * written. */
			atomic_store_explicit(&s->ready, 1, memory_order_release);
			*claimed = true;
			return s;
		}
		if (seen == fn) {
			/* Another call fills it (dladdr takes microseconds, once per function):
			 * wait rather than name this run "task". Acquire: pairs with the release
			 * store of the call that filled it. */
			while (!atomic_load_explicit(&s->ready, memory_order_acquire))
				sched_yield();
			return s;
		}
	}
	return NULL;
}

static const struct name_slot *lookup(uintptr_t fn)
{
	bool claimed;
	return slot_of(fn, NULL, &claimed);
}

int tdm__observe_name(uintptr_t fn, const char *name)
{
	if (fn == 0 || name == NULL || name[0] == '\0')
		return -EINVAL;
	bool claimed;
	const struct name_slot *s = slot_of(fn, name, &claimed);
	return s == NULL ? -ENOSPC : claimed ? 0 : -EALREADY; /* a name stays */
}

int tdm_task_name(tdm_fn fn, const char *name)
{
	return tdm__observe_name((uintptr_t)fn, name);
}

int tdm_resumable_name(tdm_resume_fn fn, const char *name)
{
	return tdm__observe_name((uintptr_t)fn, name);
}

void tdm__observe_fn_name(void (*fn)(void), char *out, size_t len)
{
	const struct name_slot *s = lookup((uintptr_t)fn);
	if (s != NULL)
		snprintf(out, len, "%s", s->text);
	else
		name_of((uintptr_t)fn, out, len); /* the table is full: dladdr each time */
}

#ifdef TANDEM_HAVE_NVTX

#include <sys/syscall.h>
#include <unistd.h>

/* The headers' own warnings are not ours (-Wpedantic on their function pointer casts). */
#define NVTX_AS_SYSTEM_HEADER
#include <nvtx3/nvToolsExt.h>
#ifdef TANDEM_HAVE_CUDA
#include <nvtx3/nvToolsExtCudaRt.h> /* nvtxNameCudaStreamA */
#endif

/* Written once in init_once, before the release store of tdm__obs; read only by hooks that saw
 * it (nvtx_on). */
static nvtxDomainHandle_t domain;
static nvtxStringHandle_t generic_name; /* "task": when the name table is full */

/* Whether the NVTX hooks report. Acquire, unlike tdm__observing(): pairs with the release store
 * in init_once, so a hook that reports sees the domain and the tool's functions however its
 * thread came to call it. Paid only while observing: the callers test tdm__observing() first. */
static bool nvtx_on(void)
{
	return (atomic_load_explicit(&tdm__obs, memory_order_acquire) & TDM__OBS_NVTX) != 0;
}

/* Called by lookup when it fills a slot: the name NVTX keeps for it, NULL while NVTX is off. */
static void *nvtx_register(const char *text)
{
	return nvtx_on() ? (void *)nvtxDomainRegisterStringA(domain, text) : NULL;
}

static void init_once(void)
{
	const char *tool = getenv("NVTX_INJECTION64_PATH");
	if (tool == NULL || tool[0] == '\0')
		return;
	/* NVTX's first call loads the tool here, on one thread, before tandem starts any. */
	domain = nvtxDomainCreateA("tandem");
	if (domain == NULL)
		return; /* no tool took it */
	generic_name = nvtxDomainRegisterStringA(domain, "task");
	/* Release: pairs with the acquire load in nvtx_on; domain, generic_name and NVTX's own
	 * function pointers (the tool's) are written. */
	atomic_fetch_or_explicit(&tdm__obs, TDM__OBS_NVTX, memory_order_release);
}

void tdm__observe_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, init_once);
}

static void nvtx_thread(const char *name)
{
	if (!nvtx_on())
		return;
	nvtxNameOsThreadA((uint32_t)syscall(SYS_gettid), name);
}

static uint64_t nvtx_run_begin(void (*fn)(void))
{
	nvtxEventAttributes_t a;
	memset(&a, 0, sizeof(a));
	a.version = NVTX_VERSION;
	a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
	const struct name_slot *s = lookup((uintptr_t)fn);
	if (s != NULL && s->name != NULL) {
		a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
		a.message.registered = (nvtxStringHandle_t)s->name;
	} else if (s != NULL) {
		/* A tool without registered strings: the slot's text stays for the process. */
		a.messageType = NVTX_MESSAGE_TYPE_ASCII;
		a.message.ascii = s->text;
	} else if (generic_name != NULL) {
		a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
		a.message.registered = generic_name;
	} else {
		a.messageType = NVTX_MESSAGE_TYPE_ASCII;
		a.message.ascii = "task";
	}
	if (s != NULL) {
		a.colorType = NVTX_COLOR_ARGB;
		a.color = s->color;
	}
	return nvtxDomainRangeStartEx(domain, &a);
}

static void nvtx_run_end(uint64_t token)
{
	nvtxDomainRangeEnd(domain, token);
}

void tdm__observe_stream(void *native, int device, bool high, unsigned index)
{
	if (!nvtx_on() || native == NULL)
		return;
#ifdef TANDEM_HAVE_CUDA
	char name[48];
	snprintf(name, sizeof(name), "tandem dev %d %s %u", device, high ? "high" : "normal",
	         index);
	nvtxNameCudaStreamA((cudaStream_t)native, name);
#else
	(void)device;
	(void)high;
	(void)index;
#endif
}

void tdm__observe_mark(const char *what)
{
	if (!nvtx_on())
		return;
	nvtxEventAttributes_t a;
	memset(&a, 0, sizeof(a));
	a.version = NVTX_VERSION;
	a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
	a.colorType = NVTX_COLOR_ARGB;
	a.color = 0xFFD62728; /* red: something failed */
	a.messageType = NVTX_MESSAGE_TYPE_ASCII;
	a.message.ascii = what;
	nvtxDomainMarkEx(domain, &a);
}

#else /* !TANDEM_HAVE_NVTX: only the trace can be on */

static void *nvtx_register(const char *text)
{
	(void)text;
	return NULL;
}

void tdm__observe_init(void)
{
}

static void nvtx_thread(const char *name)
{
	(void)name;
}

static uint64_t nvtx_run_begin(void (*fn)(void))
{
	(void)fn;
	return 0;
}

static void nvtx_run_end(uint64_t token)
{
	(void)token;
}

void tdm__observe_stream(void *native, int device, bool high, unsigned index)
{
	(void)native;
	(void)device;
	(void)high;
	(void)index;
}

void tdm__observe_mark(const char *what)
{
	(void)what;
}

#endif /* TANDEM_HAVE_NVTX */

/* ---- hooks that both observers take ---- */

void tdm__observe_thread(const char *name)
{
	tdm__trace_thread_name(name);
	nvtx_thread(name);
}

uint64_t tdm__observe_run_begin(void (*fn)(void))
{
	/* Acquire: pairs with the release store in init_once (NVTX's domain and functions) and
	 * with the release RMW in tdm_trace_start (the trace's session). */
	unsigned on = atomic_load_explicit(&tdm__obs, memory_order_acquire);
	if (on & TDM__OBS_TRACE) {
		/* A traced run names fn now (its symbol; after the first, one hash and two loads),
		 * not when the file is written: a later tdm_task_name is -EALREADY then, and
		 * renames no run already in the trace. */
		(void)lookup((uintptr_t)fn);
		tdm__trace_record(TDM__TR_RUN_BEGIN, (uint64_t)(uintptr_t)fn);
	}
	return (on & TDM__OBS_NVTX) ? nvtx_run_begin(fn) : 0;
}

void tdm__observe_run_end(uint64_t token)
{
	/* Acquire: as in tdm__observe_run_begin. NVTX's bit never changes once set: the end is
	 * reported exactly when the begin was. The trace's may; its writer balances the spans. */
	unsigned on = atomic_load_explicit(&tdm__obs, memory_order_acquire);
	if (on & TDM__OBS_NVTX)
		nvtx_run_end(token);
	if (on & TDM__OBS_TRACE)
		tdm__trace_record(TDM__TR_RUN_END, 0);
}
