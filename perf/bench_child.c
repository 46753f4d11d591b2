// SPDX-License-Identifier: MIT
/*
 * perf/bench_child.c: the libomp baseline, measured in a child process. LLVM's libomp and GCC's
 * libgomp both define the OpenMP entry points, so one process has one of them: tandem-bench keeps
 * its compiler's (bench_omp.c) and runs tandem-bench-libomp (bench_libomp.c, built by clang) for
 * each libomp configuration, which times it with the same code (bench_run.c) and prints each
 * repetition. The program is TANDEM_BENCH_LIBOMP where set, else tandem-bench-libomp beside
 * tandem-bench.
 */
#include "bench.h"

#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

const char *bench_libomp_path(void)
{
	static char path[PATH_MAX];
	const char *env = getenv("TANDEM_BENCH_LIBOMP");
	ssize_t n;
	char *slash;

	if (env != NULL && env[0] != '\0')
		return env;
	if (path[0] != '\0')
		return path;
	n = readlink("/proc/self/exe", path, sizeof(path) - 1);
	if (n <= 0)
		return "tandem-bench-libomp";
	path[n] = '\0';
	slash = strrchr(path, '/');
	if (slash == NULL || (size_t)(slash - path) + sizeof("/tandem-bench-libomp") > sizeof(path))
		return "tandem-bench-libomp";
	strcpy(slash, "/tandem-bench-libomp");
	return path;
}

/* Ends tandem-bench: the child's own message, if any, came before on stderr. */
_Noreturn static void child_failed(const char *what)
{
	fprintf(stderr, "tandem-bench: libomp baseline (%s): %s\n", bench_libomp_path(), what);
	exit(1);
}

static void libomp_measure(unsigned threads, enum bench_kind b, uint64_t param, int reps,
                           double *ms, double *pct)
{
	static const char *const kinds[] = {"fib", "skynet", "spawn", "idle"};
	char t[16], p[24], r[16];
	char *argv[6];
	int fd[2], status, got = 0;
	posix_spawn_file_actions_t fa;
	pid_t pid;
	FILE *in;

	if ((unsigned)b > BENCH_IDLE)
		child_failed("not a CPU benchmark");
	snprintf(t, sizeof(t), "%u", threads);
	snprintf(p, sizeof(p), "%llu", (unsigned long long)param);
	snprintf(r, sizeof(r), "%d", reps);
	argv[0] = (char *)bench_libomp_path();
	argv[1] = (char *)kinds[b];
	argv[2] = t;
	argv[3] = p;
	argv[4] = r;
	argv[5] = NULL;
	if (pipe(fd) != 0)
		child_failed("pipe failed");
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fd[1], STDOUT_FILENO);
	posix_spawn_file_actions_addclose(&fa, fd[0]);
	posix_spawn_file_actions_addclose(&fa, fd[1]);
	if (posix_spawn(&pid, argv[0], &fa, NULL, argv, environ) != 0)
		child_failed("cannot be started");
	posix_spawn_file_actions_destroy(&fa);
	close(fd[1]);
	in = fdopen(fd[0], "r");
	if (in == NULL)
		child_failed("fdopen failed");
	while (got < reps && fscanf(in, "%lf %lf", &ms[got], &pct[got]) == 2)
		got++;
	fclose(in);
	if (waitpid(pid, &status, 0) != pid)
		child_failed("waitpid failed");
	if (WIFSIGNALED(status)) {
		snprintf(t, sizeof(t), "signal %d", WTERMSIG(status));
		child_failed(t);
	}
	if (WEXITSTATUS(status) != 0) {
		snprintf(t, sizeof(t), "exit status %d", WEXITSTATUS(status));
		child_failed(t);
	}
	if (got != reps)
		child_failed("it printed fewer repetitions than asked for");
}

static const struct bench_impl libomp_impl = {
    "libomp", NULL, NULL, NULL, NULL, NULL, libomp_measure,
};

const struct bench_impl *bench_libomp(void)
{
	const struct bench_impl *in_process = bench_omp();

	/* tandem-bench built by clang has libomp itself. */
	if (in_process != NULL && strcmp(in_process->name, "libomp") == 0)
		return NULL;
	return access(bench_libomp_path(), X_OK) == 0 ? &libomp_impl : NULL;
}
