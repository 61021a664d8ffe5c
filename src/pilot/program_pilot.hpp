#pragma once
// The user's own program as the pilot's workers (docs/program.md). Internal to pilot.
#include "pilot_context.hpp"

namespace anchor::pilot {

// The user's own program as the pilot's workers (docs/program.md), from the
// point where the run directory is locked and config.json written.
ExitCode run_program_pilot(Pilot& p);

}  // namespace anchor::pilot
