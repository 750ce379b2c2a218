/* The variadic exec functions (execl, execlp, execle), which stable Rust cannot define:
 * lib.rs exports them as naked jumps to these, leaving the variadic arguments untouched.
 * Each collects its arguments into an array and calls the array form, which this library
 * also interposes (lib.rs): so every exec drains the recording and stops the calling
 * thread's sampling first. A SIGTRAP raised by an overflow during execve would otherwise
 * be delivered to the new image before the agent is loaded there, and kill it. */
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

int strobe_execl(const char *path, const char *arg, ...) {
    va_list ap;
    size_t n = 1;
    va_start(ap, arg);
    while (va_arg(ap, const char *) != NULL) n++;
    va_end(ap);
    const char *argv[n + 1];
    argv[0] = arg;
    va_start(ap, arg);
    for (size_t i = 1; i <= n; i++) argv[i] = va_arg(ap, const char *);
    va_end(ap);
    return execv(path, (char *const *)argv);
}

int strobe_execlp(const char *file, const char *arg, ...) {
    va_list ap;
    size_t n = 1;
    va_start(ap, arg);
    while (va_arg(ap, const char *) != NULL) n++;
    va_end(ap);
    const char *argv[n + 1];
    argv[0] = arg;
    va_start(ap, arg);
    for (size_t i = 1; i <= n; i++) argv[i] = va_arg(ap, const char *);
    va_end(ap);
    return execvp(file, (char *const *)argv);
}

int strobe_execle(const char *path, const char *arg, ...) {
    va_list ap;
    size_t n = 1;
    va_start(ap, arg);
    while (va_arg(ap, const char *) != NULL) n++;
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    const char *argv[n + 1];
    argv[0] = arg;
    va_start(ap, arg);
    for (size_t i = 1; i <= n; i++) argv[i] = va_arg(ap, const char *);
    va_end(ap);
    return execve(path, (char *const *)argv, envp);
}
