// SPDX-License-Identifier: MIT
/*
 * The test suite's own NVTX tool: what Nsight Systems is to a profiled program, minus the
 * profile. NVTX loads it from NVTX_INJECTION64_PATH at the program's first NVTX call and calls
 * InitializeInjectionNvtx2, which puts counting functions into NVTX's function table (the
 * callbacks export table: one table per module, CORE for thread names and plain marks, CORE2 for
 * domains, CUDART for stream names). Counts and strings go into one struct (nvtx_inject.h) that
 * the tests read. Built as a module for test_nvtx; compiled into test_nvtx_off with
 * NVTX_INJECT_STATIC, as a statically linked tool that NVTX finds without the variable.
 * NVTX_INJECT_NOOP=1 in the environment makes it a tool that records nothing (measurements).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NVTX_NO_IMPL /* a tool: the types and declarations, none of NVTX's own code */
#define NVTX_AS_SYSTEM_HEADER
#include <nvtx3/nvToolsExt.h>

#include "nvtx_inject.h"

static struct nvtx_inject state = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The domains this tool hands out: "tandem", and any other name. */
static struct nvtxDomainRegistration_st {
	int unused;
} tandem_domain, other_domain;

/* Range ids: 1, 2, ...; each end sets its id's bit once (a second end is a bad one). */
#define MAX_IDS (1u << 20)
static atomic_ulong next_id;
static atomic_ulong ended[MAX_IDS / 64];

/* The calling thread's open ranges, innermost last. */
#define MAX_DEPTH 256
static _Thread_local nvtxRangeId_t open_ranges[MAX_DEPTH];
static _Thread_local unsigned depth;

struct nvtx_inject *nvtx_inject_state(void)
{
	return &state;
}

static void keep(char *dst, const char *src)
{
	snprintf(dst, NVTX_INJECT_LEN, "%s", src != NULL ? src : "(null)");
}

static nvtxDomainHandle_t domain_create(const char *name)
{
	atomic_fetch_add(&state.domains, 1);
	return strcmp(name, "tandem") == 0 ? &tandem_domain : &other_domain;
}

static nvtxStringHandle_t register_string(nvtxDomainHandle_t d, const char *s)
{
	if (d != &tandem_domain) {
		atomic_fetch_add(&state.foreign, 1);
		return NULL;
	}
	atomic_fetch_add(&state.strings, 1);
	pthread_mutex_lock(&state.lock);
	uintptr_t h = 0;
	for (unsigned i = 0; i < state.nstrings && h == 0; i++)
		if (strcmp(state.string[i], s) == 0)
			h = i + 1;
	if (h == 0 && state.nstrings < NVTX_INJECT_NAMES) {
		keep(state.string[state.nstrings], s);
		h = ++state.nstrings;
	}
	pthread_mutex_unlock(&state.lock);
	return (nvtxStringHandle_t)h;
}

static nvtxRangeId_t range_start(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
	if (d != &tandem_domain) {
		atomic_fetch_add(&state.foreign, 1);
		return 0;
	}
	atomic_fetch_add(&state.range_starts, 1);
	uintptr_t h = (uintptr_t)a->message.registered;
	if (a->messageType == NVTX_MESSAGE_TYPE_REGISTERED && h >= 1 && h <= NVTX_INJECT_NAMES)
		atomic_fetch_add(&state.string_uses[h - 1], 1);
	else if (a->messageType != NVTX_MESSAGE_TYPE_ASCII || a->message.ascii == NULL)
		atomic_fetch_add(&state.unnamed, 1);
	nvtxRangeId_t id = atomic_fetch_add(&next_id, 1) + 1;
	if (depth < MAX_DEPTH)
		open_ranges[depth] = id;
	unsigned long d1 = ++depth, max = atomic_load(&state.max_depth);
	while (d1 > max && !atomic_compare_exchange_weak(&state.max_depth, &max, d1)) {
	}
	return id;
}

static void range_end(nvtxDomainHandle_t d, nvtxRangeId_t id)
{
	if (d != &tandem_domain) {
		atomic_fetch_add(&state.foreign, 1);
		return;
	}
	atomic_fetch_add(&state.range_ends, 1);
	if (depth == 0 || (depth <= MAX_DEPTH && open_ranges[depth - 1] != id))
		atomic_fetch_add(&state.misnested, 1);
	else
		depth--;
	if (id == 0 || id > atomic_load(&next_id)) {
		atomic_fetch_add(&state.bad_ends, 1);
	} else if (id < MAX_IDS) {
		unsigned long bit = 1ul << (id % 64);
		if (atomic_fetch_or(&ended[id / 64], bit) & bit)
			atomic_fetch_add(&state.bad_ends, 1);
	}
}

static void domain_mark(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
	if (d != &tandem_domain) {
		atomic_fetch_add(&state.foreign, 1);
		return;
	}
	pthread_mutex_lock(&state.lock);
	keep(state.last_mark,
	     a->messageType == NVTX_MESSAGE_TYPE_ASCII ? a->message.ascii : "(not ascii)");
	pthread_mutex_unlock(&state.lock);
	atomic_fetch_add(&state.marks, 1);
}

static void mark_a(const char *message)
{
	(void)message;
	atomic_fetch_add(&state.other_marks, 1);
}

static void name_thread(uint32_t tid, const char *name)
{
	(void)tid;
	pthread_mutex_lock(&state.lock);
	if (state.nthreads < NVTX_INJECT_NAMES)
		keep(state.threads[state.nthreads++], name);
	pthread_mutex_unlock(&state.lock);
	atomic_fetch_add(&state.thread_names, 1);
}

static void name_stream(void *stream, const char *name)
{
	(void)stream;
	pthread_mutex_lock(&state.lock);
	keep(state.last_stream, name);
	pthread_mutex_unlock(&state.lock);
	atomic_fetch_add(&state.stream_names, 1);
}

/* NVTX_INJECT_NOOP set: a tool that records nothing, for measuring what a range costs tandem
 * and NVTX without the counting tool's own shared counters (docs/design/observe.md). */
static nvtxDomainHandle_t noop_domain_create(const char *name)
{
	(void)name;
	return &tandem_domain;
}

static nvtxStringHandle_t noop_register_string(nvtxDomainHandle_t d, const char *s)
{
	(void)d;
	(void)s;
	return (nvtxStringHandle_t)(uintptr_t)1;
}

static nvtxRangeId_t noop_range_start(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
	(void)d;
	(void)a;
	return 1;
}

static void noop_range_end(nvtxDomainHandle_t d, nvtxRangeId_t id)
{
	(void)d;
	(void)id;
}

/* Points slot id of a module's table at fn; 0 when the table has no such slot. */
static int install(const NvtxExportTableCallbacks *cb, NvtxCallbackModule module, unsigned id,
                   NvtxFunctionPointer fn)
{
	NvtxFunctionTable table = NULL;
	unsigned size = 0;
	if (!cb->GetModuleFunctionTable(module, &table, &size) || table == NULL || id >= size ||
	    table[id] == NULL)
		return 0;
	*table[id] = fn;
	return 1;
}

__attribute__((visibility("default"))) int
InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table)
{
	const NvtxExportTableCallbacks *cb = get_export_table(NVTX_ETID_CALLBACKS);
	if (cb == NULL || cb->struct_size < sizeof(*cb))
		return 0;
	/* Casts to NVTX's generic function pointer type; NVTX casts each back to its own. */
	const char *noop = getenv("NVTX_INJECT_NOOP");
	if (noop != NULL && noop[0] != '\0')
		return install(cb, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainCreateA,
		               (NvtxFunctionPointer)noop_domain_create) &&
		       install(cb, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRegisterStringA,
		               (NvtxFunctionPointer)noop_register_string) &&
		       install(cb, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangeStartEx,
		               (NvtxFunctionPointer)noop_range_start) &&
		       install(cb, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangeEnd,
		               (NvtxFunctionPointer)noop_range_end);
	return install(cb, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainCreateA,
	               (NvtxFunctionPointer)domain_create) &&
	       install(cb, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRegisterStringA,
	               (NvtxFunctionPointer)register_string) &&
	       install(cb, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangeStartEx,
	               (NvtxFunctionPointer)range_start) &&
	       install(cb, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangeEnd,
	               (NvtxFunctionPointer)range_end) &&
	       install(cb, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainMarkEx,
	               (NvtxFunctionPointer)domain_mark) &&
	       install(cb, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_NameOsThreadA,
	               (NvtxFunctionPointer)name_thread) &&
	       install(cb, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_MarkA,
	               (NvtxFunctionPointer)mark_a) &&
	       install(cb, NVTX_CB_MODULE_CUDART, NVTX_CBID_CUDART_NameCudaStreamA,
	               (NvtxFunctionPointer)name_stream);
}

#ifdef NVTX_INJECT_STATIC
/* NVTX's weak pointer, defined here: the tool is found without NVTX_INJECTION64_PATH. */
NvtxInitializeInjectionNvtxFunc_t InitializeInjectionNvtx2_fnptr = InitializeInjectionNvtx2;
#endif
