// Job-control stops held back while this process runs its host's shared device (docs/decisions.md,
// "A stopped process"): SIGTSTP, SIGTTIN and SIGTTOU (Ctrl-Z, a background job touching its
// terminal) that arrive while a thread of this process holds, or waits for, the device lock stop the
// process only once the lock is released, so the other processes of the host never wait on a lock
// whose holder sits stopped. SIGSTOP and ptrace stops (a debugger) cannot be caught and are not
// covered. Only signals whose disposition is the default (stop) are taken over, and a program that
// installs its own handler later simply replaces ours.
#pragma once

namespace softhca::runtime {

// Takes over the default stop of SIGTSTP, SIGTTIN and SIGTTOU once per process (idempotent,
// thread-safe). Not async-signal-safe.
void install_stop_deferral();

// Brackets every stretch in which a thread of this process may hold the device lock: from before
// it asks for the lock until after it has released it (up to 65535 threads at once). A stop that
// arrived meanwhile is carried out when the last of them leaves. Async-signal-safe; a relaxed
// read-modify-write each on a line private to this process.
void device_entered();
void device_exited();

// Stops carried out late by device_exited() (for tests and diagnostics).
[[nodiscard]] unsigned long stops_deferred();

}  // namespace softhca::runtime
