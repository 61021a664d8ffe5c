#pragma once
// SIGINT and SIGTERM in the supervisor: the handler sets a flag and nothing
// else; the drivers' loops ask for it between their steps (HOUSE_STYLE.md,
// "Errors"). A blocking read returns EINTR, so a loop sees it promptly.

namespace anchor::pilot {

// Installs the handlers for SIGINT and SIGTERM (no SA_RESTART).
void install_signal_handlers();

// The signal received since the handlers were installed: SIGINT or SIGTERM,
// 0 when none.
int interrupt_signal();

}  // namespace anchor::pilot
