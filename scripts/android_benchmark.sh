#!/usr/bin/env bash
# Runbook: benchmark a converted folder on an Android phone with TFLite's stock benchmark_model and this delegate.
#
#   scripts/android_benchmark.sh [options] CONVERTED_DIR LIBSDGPU_DELEGATE_SO
#
# Pushes the folder and the delegate (an arm64-v8a build: docs/build.md) to /data/local/tmp/sdconvert with adb, then
# runs, for each model of the folder (text_encoder, unet, vae_decoder, vae_encoder: the .tflite files present),
#   benchmark_model --graph=... --external_delegate_path=... --external_delegate_options='backend:opencl;...'
# Options:
#   --backend opencl|gl|cpu     delegate backend (default opencl; cpu runs only the Sd* ops, XNNPACK the rest)
#   --models a,b                only these models (default: every one the folder has)
#   --benchmark-model PATH      push this benchmark_model binary (the stock android_arm64 build) first; without it
#                               the one already at /data/local/tmp/benchmark_model is used (TFLite's documented place)
#   --delegate-options 'k:v;..' more delegate options (custom_ops/delegate/options.h), appended
#   --num-threads N             benchmark_model --num_threads (default 4)
#   --num-runs N                benchmark_model --num_runs (default 10; one warm-up run first)
#   --serial SERIAL             the device, as adb -s takes it (default: the only one attached)
#   --dry-run                   print the commands, run nothing
# With no adb on PATH or no device attached it prints the commands instead of running them (a dry run), exit 0.
# Errors in the arguments: one line "android_benchmark.sh: error: ..." and exit 2.
set -euo pipefail

PROG=android_benchmark.sh
DEVICE_DIR=/data/local/tmp/sdconvert
STOCK_BENCHMARK=/data/local/tmp/benchmark_model
MODEL_NAMES="text_encoder unet vae_decoder vae_encoder"

die() {
  echo "$PROG: error: $*" >&2
  exit 2
}

backend=opencl models="" benchmark="" extra="" threads=4 runs=10 serial="" dry=0
positional=()
while [ $# -gt 0 ]; do
  case "$1" in
    --backend|--models|--benchmark-model|--delegate-options|--num-threads|--num-runs|--serial)
      [ $# -ge 2 ] || die "$1 needs a value" ;;
  esac
  case "$1" in
    --backend) backend=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --benchmark-model) benchmark=$2; shift 2 ;;
    --delegate-options) extra=$2; shift 2 ;;
    --num-threads) threads=$2; shift 2 ;;
    --num-runs) runs=$2; shift 2 ;;
    --serial) serial=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1" ;;
    *) positional+=("$1"); shift ;;
  esac
done
[ ${#positional[@]} -eq 2 ] || die "expected CONVERTED_DIR and LIBSDGPU_DELEGATE_SO (see --help)"
folder=${positional[0]%/} delegate=${positional[1]}
[ -d "$folder" ] || die "$folder is not a folder"
[ -f "$delegate" ] || die "$delegate does not exist"
[ -z "$benchmark" ] || [ -f "$benchmark" ] || die "$benchmark does not exist"
case "$backend" in opencl|gl|cpu) ;; *) die "--backend must be opencl, gl or cpu, got $backend" ;; esac
case "$threads,$runs" in *[!0-9,]*|,*|*,|*,0|0,*) die "--num-threads and --num-runs take positive integers" ;; esac
case "$extra" in *\"*|*\$*|*\`*|*\\*) die "--delegate-options must not contain quotes, \$, \` or backslashes" ;; esac

selected=()
for name in ${models//,/ }; do
  case " $MODEL_NAMES " in *" $name "*) ;; *) die "unknown model $name (one of: $MODEL_NAMES)" ;; esac
  [ -f "$folder/$name.tflite" ] || die "$folder has no $name.tflite"
  selected+=("$name")
done
if [ -z "$models" ]; then
  for name in $MODEL_NAMES; do [ -f "$folder/$name.tflite" ] && selected+=("$name"); done
fi
[ ${#selected[@]} -gt 0 ] || die "$folder has no .tflite model (expected one of: $MODEL_NAMES)"

adb=(adb)
[ -z "$serial" ] || adb+=(-s "$serial")
if [ "$dry" -eq 0 ]; then
  if ! command -v adb >/dev/null 2>&1; then
    echo "$PROG: adb not found: dry run, the commands are:"
    dry=1
  elif ! adb devices | awk -v s="$serial" 'NR > 1 && $2 == "device" && (s == "" || $1 == s) {ok = 1} END {exit !ok}'; then
    echo "$PROG: no device attached${serial:+ with serial $serial}: dry run, the commands are:"
    dry=1
  fi
fi

# run ARGS...: print the command, then run it unless dry. An argument with characters the shell treats specially
# (only the device command line has them, and it never contains double quotes) is printed in double quotes.
run() {
  local line="+" arg
  for arg in "$@"; do
    case "$arg" in
      *[!A-Za-z0-9_./:=,+@%-]*) line+=" \"$arg\"" ;;
      *) line+=" $arg" ;;
    esac
  done
  echo "$line"
  [ "$dry" -eq 1 ] || "$@"
}

remote_folder="$DEVICE_DIR/$(basename "$folder")"
remote_delegate="$DEVICE_DIR/libsdgpu_delegate.so"
options="backend:$backend"
# The OpenCL program-binary cache in a folder the shell user can write (the default is under $HOME).
[ "$backend" != opencl ] || options+=";opencl_cache_dir:$DEVICE_DIR/cache"
[ -z "$extra" ] || options+=";$extra"

run "${adb[@]}" shell "mkdir -p $DEVICE_DIR/cache"
run "${adb[@]}" push "$delegate" "$remote_delegate"
run "${adb[@]}" push "$folder" "$DEVICE_DIR/"
bench=$STOCK_BENCHMARK
if [ -n "$benchmark" ]; then
  bench="$DEVICE_DIR/benchmark_model"
  run "${adb[@]}" push "$benchmark" "$bench"
  run "${adb[@]}" shell "chmod +x $bench"
fi
for name in "${selected[@]}"; do
  run "${adb[@]}" shell "$bench --graph=$remote_folder/$name.tflite --external_delegate_path=$remote_delegate\
 --external_delegate_options='$options' --num_threads=$threads --num_runs=$runs --warmup_runs=1\
 --enable_op_profiling=true"
done
