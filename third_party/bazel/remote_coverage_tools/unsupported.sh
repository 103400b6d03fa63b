#!/bin/sh
echo "bazel coverage is not supported in the offline set-up (third_party/bazel/README.md)" >&2
exit 1
