// SPDX-License-Identifier: MIT
/*
 * Function names from an object's own symbol table (.symtab), for the names of task functions
 * that dladdr cannot give: dladdr reads the dynamic symbol table alone, which holds neither a
 * program's static functions nor, without -rdynamic, its global ones (docs/design/observe.md,
 * "Names").
 *
 * The object that holds an address comes from dl_iterate_phdr (its path, "" for the program:
 * /proc/self/exe, and its load bias); its file is mapped read-only once, the first time one of
 * its addresses is asked for, and its STT_FUNC symbols sorted by address; the mapping stays for
 * the process (an object unloaded by dlclose keeps its entry, which then names nothing). Only
 * 64-bit ELF of the machine's byte order. Callers: observe.c's name table, once per function,
 * when a trace is written or an NVTX range first names a function.
 */
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "symtab.h"

#define OBJECTS 64 /* objects looked at; more are named by dladdr alone */

struct sym {
	uintptr_t addr; /* the symbol's value: an address less the object's bias */
	uint64_t size;
	const char *name; /* in the mapped file */
};

struct object {
	char path[256];
	uintptr_t bias;
	struct sym *syms; /* sorted by addr; NULL: none (stripped, unreadable, not ELF64) */
	size_t n;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct object objects[OBJECTS]; /* lock */
static unsigned nobjects;              /* lock */

struct find {
	uintptr_t addr;
	const char *path;
	uintptr_t bias;
	bool found;
};

static int find_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct find *f = arg;
	for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_LOAD && f->addr >= lo && f->addr - lo < ph->p_memsz) {
			f->path = info->dlpi_name;
			f->bias = info->dlpi_addr;
			f->found = true;
			return 1;
		}
	}
	return 0;
}

static int sym_cmp(const void *a, const void *b)
{
	const struct sym *x = a, *y = b;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* The file's function symbols into o (none when it has no .symtab or is not ELF64). */
static void load(struct object *o)
{
	const char *path = o->path[0] != '\0' ? o->path : "/proc/self/exe";
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	struct stat st;
	void *map = MAP_FAILED;
	if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(ElfW(Ehdr)))
		map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return;
	size_t size = (size_t)st.st_size;
	const unsigned char *base = map;
	const ElfW(Ehdr) *eh = map;
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh->e_shentsize != sizeof(ElfW(Shdr)) || eh->e_shoff > size ||
	    (size - eh->e_shoff) / sizeof(ElfW(Shdr)) < eh->e_shnum)
		goto none;
	const ElfW(Shdr) *sh = (const void *)(base + eh->e_shoff);
	for (unsigned i = 0; i < eh->e_shnum; i++) {
		if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum)
			continue;
		const ElfW(Shdr) *strs = &sh[sh[i].sh_link];
		if (sh[i].sh_offset > size || sh[i].sh_size > size - sh[i].sh_offset ||
		    strs->sh_offset > size || strs->sh_size > size - strs->sh_offset ||
		    strs->sh_size == 0 || base[strs->sh_offset + strs->sh_size - 1] != '\0')
			goto none;
		const ElfW(Sym) *syms = (const void *)(base + sh[i].sh_offset);
		size_t n = sh[i].sh_size / sizeof(ElfW(Sym));
		o->syms = malloc((n + 1) * sizeof(*o->syms));
		if (o->syms == NULL)
			goto none;
		for (size_t k = 0; k < n; k++)
			if (ELF64_ST_TYPE(syms[k].st_info) == STT_FUNC && syms[k].st_value != 0 &&
			    syms[k].st_name < strs->sh_size)
				o->syms[o->n++] = (struct sym){
				    syms[k].st_value, syms[k].st_size,
				    (const char *)base + strs->sh_offset + syms[k].st_name};
		qsort(o->syms, o->n, sizeof(*o->syms), sym_cmp);
		return; /* the mapping stays: the names point into it */
	}
none:
	munmap(map, size);
}

bool tdm__symtab_name(uintptr_t addr, char *out, size_t len)
{
	struct find f = {addr, NULL, 0, false};
	dl_iterate_phdr(find_object, &f);
	if (!f.found)
		return false;
	pthread_mutex_lock(&lock);
	struct object *o = NULL;
	for (unsigned i = 0; i < nobjects && o == NULL; i++)
		if (objects[i].bias == f.bias && strcmp(objects[i].path, f.path) == 0)
			o = &objects[i];
	if (o == NULL && nobjects < OBJECTS && strlen(f.path) < sizeof(o->path)) {
		o = &objects[nobjects++];
		snprintf(o->path, sizeof(o->path), "%s", f.path);
		o->bias = f.bias;
		load(o);
	}
	bool named = false;
	if (o != NULL && o->n > 0) {
		uintptr_t a = addr - o->bias;
		size_t lo = 0, hi = o->n; /* the last symbol at or before a */
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (o->syms[mid].addr <= a)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo > 0) {
			const struct sym *s = &o->syms[lo - 1];
			if (s->addr == a) {
				snprintf(out, len, "%s", s->name);
				named = true;
			} else if (a - s->addr < s->size) {
				snprintf(out, len, "%s+0x%lx", s->name,
				         (unsigned long)(a - s->addr));
				named = true;
			}
		}
	}
	pthread_mutex_unlock(&lock);
	return named;
}
