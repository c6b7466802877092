#!/bin/sh
# `npm test` runs this after the type-check: every tap test (or the files given), then, when any
# failed, the failures once more at the very end (tap's terse reporter replaying this run), so that
# a CI log that keeps only its last few hundred lines still names the failing test and its diff.
# Results of earlier runs are cleared first: `tap replay` would replay them too.
rm -rf .tap/test-results
tap "$@"
status=$?
if [ "$status" -ne 0 ]; then
  echo
  echo "# tap exited with $status. The failures of this run once more (tap replay -R terse):"
  tap replay -R terse "$@"
fi
exit "$status"
