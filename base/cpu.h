// SPDX-License-Identifier: MIT
/*
 * What every layer assumes of the CPU: the cache line that shared data is laid out by, and the
 * hint a spin-wait gives the core.
 */
#ifndef TDM_BASE_CPU_H
#define TDM_BASE_CPU_H

#define TDM__CACHELINE 64

#if defined(__x86_64__) || defined(__i386__)
#define tdm__cpu_relax() __builtin_ia32_pause()
#else
#define tdm__cpu_relax() ((void)0)
#endif

#endif /* TDM_BASE_CPU_H */
