// SPDX-License-Identifier: MIT
/* Function names from the symbol table of the object that holds them (base/symtab.c). */
#ifndef TDM_BASE_SYMTAB_H
#define TDM_BASE_SYMTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The name of the function at addr ("fn", or "fn+0x1c" inside it) from its object's .symtab,
 * into out; false when there is none (no object, a stripped file, no function there). Any
 * thread; the first call for an object reads its file (milliseconds), the others a search. */
bool tdm__symtab_name(uintptr_t addr, char *out, size_t len);

#endif /* TDM_BASE_SYMTAB_H */
