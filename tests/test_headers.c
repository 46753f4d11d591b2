// SPDX-License-Identifier: MIT
/*
 * Specification of the headers' error lists against what the library does: every errno a public
 * header names (the .h files of include/, in their comments) has a text of its own from
 * tdm_strerror, and every field tdm_gpu_create refuses is named in its header's -EINVAL list. The
 * sources are read from the tree the test was built from (TDM_TEST_SOURCE_DIR).
 */
#include "common.h"

#include <dirent.h>
#include <regex.h>
#include <stdio.h>
#include <string.h>

TDM_TEST_SUITE(headers);

#ifndef TDM_TEST_SOURCE_DIR
#error "TDM_TEST_SOURCE_DIR names the source tree (CMakeLists.txt)"
#endif

/* The whole of path, NUL-terminated; the caller frees it. */
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	cr_assert_eq(fseek(f, 0, SEEK_END), 0);
	long n = ftell(f);
	cr_assert_geq(n, 0);
	rewind(f);
	char *s = malloc((size_t)n + 1);
	cr_assert_not_null(s);
	cr_assert_eq(fread(s, 1, (size_t)n, f), (size_t)n, "%s: short read", path);
	s[n] = '\0';
	fclose(f);
	return s;
}

/* src with everything outside its comments blanked out (code, strings), lengths kept. */
static void keep_comments(char *src)
{
	enum { CODE, BLOCK, LINE, STR } st = CODE;
	for (char *p = src; *p != '\0'; p++) {
		char c = *p;
		switch (st) {
		case CODE:
			if (c == '/' && p[1] == '*') {
				st = BLOCK;
				*p++ = ' ';
			} else if (c == '/' && p[1] == '/') {
				st = LINE;
				*p++ = ' ';
			} else if (c == '"') {
				st = STR;
			}
			if (c != '\n')
				*p = ' ';
			break;
		case BLOCK:
			if (c == '*' && p[1] == '/') {
				st = CODE;
				*p++ = ' ';
				*p = ' ';
			}
			break;
		case LINE:
			if (c == '\n')
				st = CODE;
			break;
		case STR:
			if (c == '\\' && p[1] != '\0')
				*p++ = ' ';
			else if (c == '"')
				st = CODE;
			if (*p != '\n')
				*p = ' ';
			break;
		}
	}
}

/* The errno value named `name` (ENOENT), by the C library's own names; 0 if none. */
static int errno_named(const char *name)
{
	/* Aliases glibc names by their other spelling (strerrorname_np gives one name a value). */
	static const struct {
		const char *name;
		int value;
	} alias[] = {{"ENOTSUP", ENOTSUP}, {"EWOULDBLOCK", EWOULDBLOCK}, {"EDEADLOCK", EDEADLOCK}};
	for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
		if (strcmp(alias[i].name, name) == 0)
			return alias[i].value;
	for (int e = 1; e < 4096; e++) {
		const char *n = strerrorname_np(e);
		if (n != NULL && strcmp(n, name) == 0)
			return e;
	}
	return 0;
}

#define MAX_NAMED 128

struct named {
	char name[32];
	char where[256]; /* the first header that names it */
};

/* Adds each -EXXX of header's comments to set (n entries), once. */
static void collect(const char *header, struct named *set, size_t *n)
{
	char path[512];
	snprintf(path, sizeof path, "%s/include/%s", TDM_TEST_SOURCE_DIR, header);
	char *src = slurp(path);
	keep_comments(src);
	regex_t re;
	cr_assert_eq(regcomp(&re, "-(E[A-Z]+)\\b", REG_EXTENDED), 0);
	regmatch_t m[2];
	for (const char *p = src; regexec(&re, p, 2, m, 0) == 0; p += m[0].rm_eo) {
		size_t len = (size_t)(m[1].rm_eo - m[1].rm_so);
		cr_assert_lt(len, sizeof set[0].name, "%s: a name too long", header);
		char name[sizeof set[0].name];
		memcpy(name, p + m[1].rm_so, len);
		name[len] = '\0';
		size_t i = 0;
		while (i < *n && strcmp(set[i].name, name) != 0)
			i++;
		if (i < *n)
			continue;
		cr_assert_lt(*n, MAX_NAMED);
		snprintf(set[*n].name, sizeof set[*n].name, "%s", name);
		snprintf(set[*n].where, sizeof set[*n].where, "%s", header);
		(*n)++;
	}
	regfree(&re);
	free(src);
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int is_header(const struct dirent *d)
{
	size_t n = strlen(d->d_name);
	return n > 2 && strcmp(d->d_name + n - 2, ".h") == 0;
}

/* Every errno the public headers name has tdm_strerror's text, not the one for codes tandem
 * never returns, and each its own: -ENOENT, -EISDIR, -EACCES, -ENAMETOOLONG from opening a file
 * (tdm_trace_stop, tdm_task_name), -ENOSPC from a full table, and all the others. */
Test(headers, strerror_names_every_errno_the_headers_name)
{
	char dir[512];
	snprintf(dir, sizeof dir, "%s/include", TDM_TEST_SOURCE_DIR);
	struct dirent **hs;
	int nh = scandir(dir, &hs, is_header, by_name);
	cr_assert_gt(nh, 0, "%s: no headers", dir);
	struct named set[MAX_NAMED];
	size_t n = 0;
	for (int i = 0; i < nh; i++) {
		collect(hs[i]->d_name, set, &n);
		free(hs[i]);
	}
	free(hs);
	cr_assert_geq(n, 20, "the headers name %zu errnos: the walk found too few", n);
	const char *unknown = tdm_strerror(-12345);
	int values[MAX_NAMED];
	for (size_t i = 0; i < n; i++) {
		int e = errno_named(set[i].name);
		cr_assert_gt(e, 0, "%s names -%s, which is no errno", set[i].where, set[i].name);
		values[i] = e;
		const char *m = tdm_strerror(-e);
		cr_assert_not_null(m, "-%s", set[i].name);
		cr_assert_str_neq(m, unknown, "-%s (%s) has only the text of an unknown code",
		                  set[i].name, set[i].where);
		cr_assert_gt(strlen(m), 0, "-%s", set[i].name);
		for (size_t j = 0; j < i; j++)
			if (values[j] != e)
				cr_assert_str_neq(m, tdm_strerror(-values[j]),
				                  "-%s and -%s share \"%s\"", set[i].name,
				                  set[j].name, m);
	}
	static const char *const asked[] = {"ENOENT", "ENOSPC", "EISDIR", "EACCES", "ENAMETOOLONG"};
	for (size_t a = 0; a < sizeof asked / sizeof asked[0]; a++) {
		size_t i = 0;
		while (i < n && strcmp(set[i].name, asked[a]) != 0)
			i++;
		cr_assert_lt(i, n, "no header names -%s", asked[a]);
	}
}

/* Every field the GPU layer's config check refuses (gpu/layer.c's REFUSE(field, ...)) is named in
 * tandem_gpu.h's comment over tdm_gpu_create, which lists the fields -EINVAL stands for. */
Test(headers, gpu_create_names_every_field_it_refuses)
{
	char path[512];
	snprintf(path, sizeof path, "%s/include/tandem_gpu.h", TDM_TEST_SOURCE_DIR);
	char *h = slurp(path);
	char *decl = strstr(h, "int tdm_gpu_create(");
	cr_assert_not_null(decl, "tandem_gpu.h declares tdm_gpu_create");
	*decl = '\0';
	char *doc =
	    strstr(h, "Starts the GPU layer"); /* the comment's head, above the declaration */
	cr_assert_not_null(doc, "tdm_gpu_create's comment");

	snprintf(path, sizeof path, "%s/gpu/layer.c", TDM_TEST_SOURCE_DIR);
	char *src = slurp(path);
	regex_t re;
	cr_assert_eq(regcomp(&re, "return REFUSE\\(([a-z_]+),", REG_EXTENDED), 0);
	regmatch_t m[2];
	unsigned fields = 0;
	for (const char *p = src; regexec(&re, p, 2, m, 0) == 0; p += m[0].rm_eo) {
		char field[64];
		size_t len = (size_t)(m[1].rm_eo - m[1].rm_so);
		cr_assert_lt(len, sizeof field);
		memcpy(field, p + m[1].rm_so, len);
		field[len] = '\0';
		cr_assert_not_null(
		    strstr(doc, field),
		    "tdm_gpu_create refuses tdm_gpu_config.%s, which its -EINVAL list "
		    "(tandem_gpu.h) does not name",
		    field);
		fields++;
	}
	cr_assert_geq(fields, 10, "found %u refused fields: the pattern no longer matches", fields);
	regfree(&re);
	free(src);
	free(h);
}
