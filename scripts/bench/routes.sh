#!/usr/bin/env bash
# What routes cost a request: W1's user-space instructions per request
# (callgrind, scripts/bench/profile.sh) through fencegate without a
# configuration file, and with one of 20 [[route]] tables (19 that W1 never
# matches, tried first; the one it does, in a fence namespace of its own,
# then in the default one):
#
#   scripts/bench/routes.sh
#
# The goal (docs/CONFIGURATION.md): at most 2 % more than without routes.
# Each run's profile (the functions with the most instructions of their
# own) is kept in target/bench/routes-{none,named,default}.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p target/bench
write_config() { # write_config FILE W1_NAMESPACE_LINE
  {
    for i in $(seq -w 1 19); do
      printf '[[route]]\nname = "r%s"\nmatch = { path_prefix = "/r%s/" }\n\n' "$i" "$i"
    done
    printf '[[route]]\nname = "w1"\nmatch = { path_prefix = "/w1/" }\n%s\n' "$2"
  } >"$1"
}
write_config target/bench/routes-20.toml ''
write_config target/bench/routes-20-default.toml 'fence_namespace = ""'

instructions() { # instructions NAME EXTRA_ARGS: the profile in target/bench/routes-NAME.txt
  PROFILE_PARTS=callgrind PROFILE_NGINX=0 PROFILE_GATEWAY_ARGS="$2" scripts/bench/profile.sh w1 \
    >"target/bench/routes-$1.txt"
  awk '/instructions per request/ { print $4; exit }' "target/bench/routes-$1.txt"
}
none=$(instructions none "")
named=$(instructions named "--config $PWD/target/bench/routes-20.toml")
default=$(instructions default "--config $PWD/target/bench/routes-20-default.toml")
ratio() { awk -v a="$1" -v b="$none" 'BEGIN { printf "%.3f", a / b }'; }
printf 'W1 instructions per request (callgrind, one run)\n'
printf '  no configuration file                        %s\n' "$none"
printf '  20 routes, W1 in fence namespace "w1"        %s  (%s x)\n' "$named" "$(ratio "$named")"
printf '  20 routes, W1 in the default namespace       %s  (%s x)\n' "$default" "$(ratio "$default")"
