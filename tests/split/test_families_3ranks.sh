#!/usr/bin/env bash
# Every fixtures/hf family whole vs split over 3 ranks (tests/split/families.sh).
NP=3
. "$(dirname "$0")/families.sh"
