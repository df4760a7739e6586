#!/bin/sh
# The flash kernel's GPU checks and benchmarks: kern.sh with KERN=flash.
KERN=flash exec sh "$(dirname "$0")/kern.sh" "$@"
