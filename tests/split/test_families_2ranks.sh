#!/usr/bin/env bash
# Every fixtures/hf family whole vs split over 2 ranks (tests/split/families.sh).
NP=2
. "$(dirname "$0")/families.sh"
