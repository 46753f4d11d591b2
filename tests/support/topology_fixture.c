// SPDX-License-Identifier: MIT
/*
 * Recorded machines (tdm__topology_load): a line-based text format parsed into the same struct as
 * live discovery, so that decisions and placement are tested on machines we do not have.
 *
 * The format (tests/fixtures/<name>.topo): blank lines and lines whose first non-blank character is
 * '#' are ignored. A record is a keyword and its fields; key=value fields take a bare value (no
 * blanks) or a "quoted value" (no '"' inside). The first record must be the header.
 *
 *   tandem-topology 1               header: format version 1
 *   note <text>                     what machine this is (optional)
 *   env <NAME> [<value>]            CUDA_VISIBLE_DEVICES or CUDA_DEVICE_MAX_CONNECTIONS as the
 *                                   recorded process had it; no line: unset
 *   affinity <cpulist>              CPUs the recorded process could run on (optional)
 *   nvml ok [<text>]                NVML was available (text: e.g. the driver version)
 *   nvml none <reason>              it was not, and why
 *   gpu <n> uuid= name= [sms= mem_mib= bus= numa= cpus= copy_engines= mig=]
 *                                   a physical GPU, n its NVML index (or CUDA ordinal without
 *                                   NVML); mig=enabled|disabled|unknown (default unknown)
 *   mig <n> uuid= profile= [gi= ci= sms= mem_mib= copy_engines= name=]
 *                                   a MIG instance on gpu n (declared before); its bus, NUMA node
 *                                   and CPUs are gpu n's
 *   cuda <ordinal> <uuid>           CUDA's device <ordinal> (0, 1, ... in order) is that GPU or
 *                                   instance: the device entries, as the recorded process saw them
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topology.h"

#define FIXTURE_MAX_BYTES (1u << 20)

struct parser {
	struct tdm__topology *t;
	int line;
	char *err;
	size_t errlen;
	int *cuda_map; /* machine entry of each CUDA ordinal */
	int ncuda;
};

__attribute__((format(printf, 2, 3))) static int perr(struct parser *p, const char *fmt, ...)
{
	char msg[TDM__TOPO_WHY];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (p->err != NULL)
		tdm__topo_say(p->err, p->errlen, "line %d: %s", p->line, msg);
	return -EINVAL;
}

static const char *skip_blanks(const char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	return s;
}

/* A blank-separated word into out; -EINVAL if it does not fit. */
static int next_word(struct parser *p, const char **s, char *out, size_t len)
{
	const char *b = skip_blanks(*s);
	size_t n = strcspn(b, " \t");
	if (n >= len)
		return perr(p, "'%.20s...' is too long", b);
	memcpy(out, b, n);
	out[n] = '\0';
	*s = b + n;
	return 0;
}

struct field {
	char key[24];
	char val[TDM__TOPO_CPUS];
};

/* The next key=value: 1, 0 at the end of the line, or -EINVAL. */
static int next_field(struct parser *p, const char **s, struct field *f)
{
	const char *b = skip_blanks(*s);
	if (*b == '\0')
		return 0;
	size_t k = 0;
	while (b[k] == '_' || isalnum((unsigned char)b[k]))
		k++;
	if (k == 0 || b[k] != '=')
		return perr(p, "expected key=value, found '%.24s'", b);
	if (k >= sizeof(f->key))
		return perr(p, "key '%.24s...' is too long", b);
	memcpy(f->key, b, k);
	f->key[k] = '\0';
	b += k + 1;
	size_t n;
	if (*b == '"') {
		b++;
		const char *q = strchr(b, '"');
		if (q == NULL)
			return perr(p, "%s: unterminated \"", f->key);
		n = (size_t)(q - b);
		*s = q + 1;
	} else {
		n = strcspn(b, " \t");
		*s = b + n;
	}
	if (n >= sizeof(f->val))
		return perr(p, "%s: value too long", f->key);
	memcpy(f->val, b, n);
	f->val[n] = '\0';
	return 1;
}

static int parse_long(struct parser *p, const char *what, const char *val, long lo, long hi,
                      long *out)
{
	char *end;
	errno = 0;
	long v = strtol(val, &end, 10);
	if (end == val || *end != '\0' || errno != 0 || v < lo || v > hi)
		return perr(p, "%s: '%s' is not a number in %ld..%ld", what, val, lo, hi);
	*out = v;
	return 0;
}

static int parse_int(struct parser *p, const char *what, const char *val, long lo, long hi,
                     int *out)
{
	long v = 0;
	int rc = parse_long(p, what, val, lo, hi, &v);
	if (rc == 0)
		*out = (int)v;
	return rc;
}

static struct tdm__topo_dev *machine_by_uuid(struct tdm__topology *t, const char *uuid)
{
	for (int i = 0; i < t->nmachine; i++)
		if (strcmp(t->machine[i].uuid, uuid) == 0)
			return &t->machine[i];
	return NULL;
}

static struct tdm__topo_dev *machine_gpu(struct tdm__topology *t, int n)
{
	for (int i = 0; i < t->nmachine; i++)
		if (!t->machine[i].mig && t->machine[i].parent_index == n)
			return &t->machine[i];
	return NULL;
}

/* A gpu or mig record's entry onto the machine view, unless its uuid is taken. */
static int add_entry(struct parser *p, const struct tdm__topo_dev *e)
{
	if (machine_by_uuid(p->t, e->uuid) != NULL)
		return perr(p, "uuid %s given twice", e->uuid);
	return tdm__topo_dev_push(&p->t->machine, &p->t->nmachine, e);
}

/* Fields both gpu and mig records take; 1: taken, 0: not one of them, or -EINVAL. */
static int common_field(struct parser *p, const struct field *f, struct tdm__topo_dev *e)
{
	int rc;
	long mib = 0;
	if (strcmp(f->key, "uuid") == 0) {
		if (f->val[0] == '\0' || strlen(f->val) >= sizeof(e->uuid))
			return perr(p, "uuid: empty or too long");
		tdm__topo_copy(e->uuid, sizeof(e->uuid), f->val);
	} else if (strcmp(f->key, "name") == 0) {
		tdm__topo_copy(e->name, sizeof(e->name), f->val);
	} else if (strcmp(f->key, "sms") == 0) {
		if ((rc = parse_int(p, "sms", f->val, 0, 100000, &e->sm_count)) != 0)
			return rc;
	} else if (strcmp(f->key, "mem_mib") == 0) {
		if ((rc = parse_long(p, "mem_mib", f->val, 0, 1l << 30, &mib)) != 0)
			return rc;
		e->mem_bytes = (uint64_t)mib << 20;
	} else if (strcmp(f->key, "copy_engines") == 0) {
		if ((rc = parse_int(p, "copy_engines", f->val, 0, 64, &e->copy_engines)) != 0)
			return rc;
	} else {
		return 0;
	}
	return 1;
}

static int rec_gpu(struct parser *p, const char *s)
{
	struct tdm__topology *t = p->t;
	struct tdm__topo_dev e;
	struct field f;
	char word[32];
	int rc, n;
	tdm__topo_dev_blank(&e);
	if ((rc = next_word(p, &s, word, sizeof(word))) != 0 ||
	    (rc = parse_int(p, "gpu index", word, 0, 1023, &n)) != 0)
		return rc;
	if (machine_gpu(t, n) != NULL)
		return perr(p, "gpu %d given twice", n);
	e.parent_index = n;
	while ((rc = next_field(p, &s, &f)) == 1) {
		if ((rc = common_field(p, &f, &e)) < 0)
			return rc;
		if (rc == 1)
			continue;
		if (strcmp(f.key, "bus") == 0) {
			if (tdm__topology_bus_id(f.val, e.pci_bus_id, sizeof(e.pci_bus_id)) != 0)
				return perr(p, "bus: '%s' is not domain:bus:device.function",
				            f.val);
		} else if (strcmp(f.key, "numa") == 0) {
			if ((rc = parse_int(p, "numa", f.val, -1, 65535, &e.numa_node)) != 0)
				return rc;
		} else if (strcmp(f.key, "cpus") == 0) {
			if (tdm__cpulist_count(f.val) < 0)
				return perr(p, "cpus: '%s' is not a CPU list", f.val);
			tdm__topo_copy(e.cpus, sizeof(e.cpus), f.val);
		} else if (strcmp(f.key, "mig") == 0) {
			if (strcmp(f.val, "enabled") == 0)
				e.mig_mode = TDM_MIG_ENABLED;
			else if (strcmp(f.val, "disabled") == 0)
				e.mig_mode = TDM_MIG_DISABLED;
			else if (strcmp(f.val, "unknown") == 0)
				e.mig_mode = TDM_MIG_UNKNOWN;
			else
				return perr(p, "mig: '%s' is not enabled, disabled or unknown",
				            f.val);
		} else {
			return perr(p, "gpu: unknown key '%s'", f.key);
		}
	}
	if (rc < 0)
		return rc;
	if (e.uuid[0] == '\0' || e.name[0] == '\0')
		return perr(p, "gpu %d: uuid= and name= are required", n);
	tdm__topo_copy(e.parent_uuid, sizeof(e.parent_uuid), e.uuid);
	e.parent_sm_count = e.sm_count;
	return add_entry(p, &e);
}

static int rec_mig(struct parser *p, const char *s)
{
	struct tdm__topology *t = p->t;
	struct tdm__topo_dev e;
	struct field f;
	char word[32];
	int rc, n;
	tdm__topo_dev_blank(&e);
	e.mig = true;
	if ((rc = next_word(p, &s, word, sizeof(word))) != 0 ||
	    (rc = parse_int(p, "mig's gpu index", word, 0, 1023, &n)) != 0)
		return rc;
	const struct tdm__topo_dev *g = machine_gpu(t, n);
	if (g == NULL)
		return perr(p, "mig on gpu %d, which no earlier gpu record declares", n);
	if (g->mig_mode != TDM_MIG_ENABLED)
		return perr(p, "mig on gpu %d, whose MIG mode is not enabled", n);
	while ((rc = next_field(p, &s, &f)) == 1) {
		if ((rc = common_field(p, &f, &e)) < 0)
			return rc;
		if (rc == 1)
			continue;
		if (strcmp(f.key, "profile") == 0) {
			if (tdm__topology_profile_slices(f.val) == 0 ||
			    strlen(f.val) >= sizeof(e.mig_profile))
				return perr(p, "profile: '%s' is not like 1g.10gb", f.val);
			tdm__topo_copy(e.mig_profile, sizeof(e.mig_profile), f.val);
		} else if (strcmp(f.key, "gi") == 0) {
			if ((rc = parse_int(p, "gi", f.val, 0, 1000, &e.gi_id)) != 0)
				return rc;
		} else if (strcmp(f.key, "ci") == 0) {
			if ((rc = parse_int(p, "ci", f.val, 0, 1000, &e.ci_id)) != 0)
				return rc;
		} else {
			return perr(p, "mig: unknown key '%s'", f.key);
		}
	}
	if (rc < 0)
		return rc;
	if (e.uuid[0] == '\0' || e.mig_profile[0] == '\0')
		return perr(p, "mig on gpu %d: uuid= and profile= are required", n);
	if (e.name[0] == '\0')
		tdm__topo_say(e.name, sizeof(e.name), "%s MIG %s", g->name, e.mig_profile);
	tdm__topo_inherit_gpu(&e, g); /* g's parent_index is n (machine_gpu) */
	return add_entry(p, &e);
}

static int rec_cuda(struct parser *p, const char *s)
{
	char word[32], uuid[TDM__TOPO_UUID];
	int rc, ord;
	if ((rc = next_word(p, &s, word, sizeof(word))) != 0 ||
	    (rc = parse_int(p, "cuda ordinal", word, 0, 1023, &ord)) != 0 ||
	    (rc = next_word(p, &s, uuid, sizeof(uuid))) != 0)
		return rc;
	if (ord != p->ncuda)
		return perr(p, "cuda %d: ordinals go 0, 1, 2, ... (expected %d)", ord, p->ncuda);
	if (*skip_blanks(s) != '\0')
		return perr(p, "cuda %d: expected only an ordinal and a uuid", ord);
	const struct tdm__topo_dev *e = machine_by_uuid(p->t, uuid);
	if (e == NULL)
		return perr(p, "cuda %d: no gpu or mig record has uuid '%s'", ord, uuid);
	if (!e->mig && e->mig_mode == TDM_MIG_ENABLED)
		return perr(p, "cuda %d: CUDA never enumerates a GPU in MIG mode whole", ord);
	int at = (int)(e - p->t->machine);
	for (int i = 0; i < p->ncuda; i++)
		if (p->cuda_map[i] == at)
			return perr(p, "cuda %d: uuid %s is already cuda %d", ord, uuid, i);
	int *m = realloc(p->cuda_map, (size_t)(p->ncuda + 1) * sizeof(*m));
	if (m == NULL)
		return -ENOMEM;
	p->cuda_map = m;
	p->cuda_map[p->ncuda++] = at;
	return 0;
}

static int parse_record(struct parser *p, const char *line, bool *header)
{
	struct tdm__topology *t = p->t;
	char kw[32];
	const char *s = line;
	int rc = next_word(p, &s, kw, sizeof(kw));
	if (rc != 0)
		return rc;
	const char *rest = skip_blanks(s);
	if (!*header) {
		if (strcmp(kw, "tandem-topology") != 0)
			return perr(p, "expected the header 'tandem-topology 1', found '%s'", kw);
		if (strcmp(rest, "1") != 0)
			return perr(p, "format version '%s' is not 1", rest);
		*header = true;
		return 0;
	}
	if (strcmp(kw, "note") == 0) {
		tdm__topo_copy(t->note, sizeof(t->note), rest);
	} else if (strcmp(kw, "env") == 0) {
		char name[40];
		if ((rc = next_word(p, &rest, name, sizeof(name))) != 0)
			return rc;
		rest = skip_blanks(rest);
		if (strcmp(name, "CUDA_VISIBLE_DEVICES") == 0)
			tdm__topo_set_visible_devices(t, rest);
		else if (strcmp(name, "CUDA_DEVICE_MAX_CONNECTIONS") == 0)
			tdm__topo_set_max_connections(t, rest);
		else
			return perr(p,
			            "env: '%s' is not CUDA_VISIBLE_DEVICES or "
			            "CUDA_DEVICE_MAX_CONNECTIONS",
			            name);
	} else if (strcmp(kw, "affinity") == 0) {
		if (tdm__cpulist_count(rest) <= 0 || strlen(rest) >= sizeof(t->affinity))
			return perr(p, "affinity: '%s' is not a CPU list", rest);
		tdm__topo_copy(t->affinity, sizeof(t->affinity), rest);
	} else if (strcmp(kw, "nvml") == 0) {
		char how[8];
		if ((rc = next_word(p, &rest, how, sizeof(how))) != 0)
			return rc;
		rest = skip_blanks(rest);
		if (strcmp(how, "ok") == 0) {
			t->nvml = true;
			tdm__topo_copy(t->nvml_note, sizeof(t->nvml_note),
			               *rest ? rest : "available");
		} else if (strcmp(how, "none") == 0 && *rest != '\0') {
			t->nvml = false;
			tdm__topo_copy(t->nvml_note, sizeof(t->nvml_note), rest);
		} else {
			return perr(p, "nvml: expected 'ok [text]' or 'none <reason>'");
		}
	} else if (strcmp(kw, "gpu") == 0) {
		return rec_gpu(p, rest);
	} else if (strcmp(kw, "mig") == 0) {
		return rec_mig(p, rest);
	} else if (strcmp(kw, "cuda") == 0) {
		return rec_cuda(p, rest);
	} else {
		return perr(p, "unknown record '%s'", kw);
	}
	return 0;
}

static int parse_text(struct parser *p, const char *text)
{
	struct tdm__topology *t = p->t;
	bool header = false;
	char line[2048];
	const char *s = text;
	p->line = 0;
	while (*s != '\0') {
		size_t n = strcspn(s, "\n");
		p->line++;
		if (n >= sizeof(line))
			return perr(p, "longer than %zu characters", sizeof(line) - 1);
		memcpy(line, s, n);
		line[n] = '\0';
		s += n + (s[n] == '\n');
		while (n > 0 && isspace((unsigned char)line[n - 1]))
			line[--n] = '\0';
		const char *b = skip_blanks(line);
		if (*b == '\0' || *b == '#')
			continue;
		int rc = parse_record(p, b, &header);
		if (rc != 0)
			return rc;
	}
	if (!header) {
		p->line = 1;
		return perr(p, "no 'tandem-topology 1' header");
	}
	/* Instances per GPU, then the CUDA devices as copies of the entries they name. */
	for (int i = 0; i < t->nmachine; i++) {
		struct tdm__topo_dev *g = &t->machine[i];
		if (g->mig)
			continue;
		for (int k = 0; k < t->nmachine; k++)
			g->parent_instances +=
			    t->machine[k].mig && strcmp(t->machine[k].parent_uuid, g->uuid) == 0;
		for (int k = 0; k < t->nmachine; k++)
			if (strcmp(t->machine[k].parent_uuid, g->uuid) == 0)
				t->machine[k].parent_instances = g->parent_instances;
	}
	if (p->ncuda > 0) {
		t->devs = calloc((size_t)p->ncuda, sizeof(*t->devs));
		if (t->devs == NULL)
			return -ENOMEM;
		for (int i = 0; i < p->ncuda; i++) {
			t->machine[p->cuda_map[i]].index = i;
			t->devs[i] = t->machine[p->cuda_map[i]];
		}
		t->ndev = p->ncuda;
	}
	return 0;
}

static int read_file(const char *path, char **out, char *err, size_t errlen)
{
	FILE *f = fopen(path, "re");
	if (f == NULL) {
		int rc = -errno;
		if (err != NULL)
			tdm__topo_say(err, errlen, "%s: %s", path, strerror(-rc));
		return rc;
	}
	char *buf = malloc(FIXTURE_MAX_BYTES + 1);
	if (buf == NULL) {
		fclose(f);
		return -ENOMEM;
	}
	size_t n = fread(buf, 1, FIXTURE_MAX_BYTES + 1, f);
	int bad = ferror(f);
	fclose(f);
	if (bad || n > FIXTURE_MAX_BYTES) {
		free(buf);
		if (err != NULL)
			tdm__topo_say(err, errlen, "%s: %s", path,
			              bad ? "read error" : "larger than 1 MiB");
		return bad ? -EIO : -EFBIG;
	}
	buf[n] = '\0';
	if (memchr(buf, '\0', n) != NULL) {
		free(buf);
		if (err != NULL)
			tdm__topo_say(err, errlen, "%s: not a text file", path);
		return -EINVAL;
	}
	*out = buf;
	return 0;
}

int tdm__topology_load(const char *path_or_text, struct tdm__topology **out, char *err,
                       size_t errlen)
{
	if (err != NULL && errlen > 0)
		err[0] = '\0';
	if (path_or_text == NULL || out == NULL)
		return -EINVAL;
	char *owned = NULL;
	const char *text = path_or_text;
	char source[TDM__TOPO_NOTE];
	if (strchr(path_or_text, '\n') == NULL) {
		int rc = read_file(path_or_text, &owned, err, errlen);
		if (rc != 0)
			return rc;
		text = owned;
		const char *base = strrchr(path_or_text, '/');
		tdm__topo_say(source, sizeof(source), "fixture %s",
		              base != NULL ? base + 1 : path_or_text);
	} else {
		tdm__topo_say(source, sizeof(source), "fixture (text)");
	}
	struct parser p = {.err = err, .errlen = errlen};
	p.t = tdm__topo_new(source);
	if (p.t == NULL) {
		free(owned);
		return -ENOMEM;
	}
	tdm__topo_say(p.t->cuda_note, sizeof(p.t->cuda_note), "recorded");
	tdm__topo_say(p.t->nvml_note, sizeof(p.t->nvml_note), "not recorded");
	int rc = parse_text(&p, text);
	free(owned);
	free(p.cuda_map);
	if (rc != 0) {
		tdm__topology_free(p.t);
		return rc;
	}
	*out = p.t;
	return 0;
}
