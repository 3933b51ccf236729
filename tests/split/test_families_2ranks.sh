#!/usr/bin/env bash
# Every fixtures/hf family whole vs split over 2 ranks (tests/split/families.sh).
# san-skip: the split's code runs under the sanitizers in test_split.sh (2 and 3 ranks); these repeat it per family, for the arithmetic
NP=2
. "$(dirname "$0")/families.sh"
