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

instructions() { # instructions EXTRA_ARGS
  PROFILE_PARTS=callgrind PROFILE_NGINX=0 PROFILE_GATEWAY_ARGS="$1" scripts/bench/profile.sh w1 |
    awk '/instructions per request/ { print $4; exit }'
}
none=$(instructions "")
named=$(instructions "--config $PWD/target/bench/routes-20.toml")
default=$(instructions "--config $PWD/target/bench/routes-20-default.toml")
ratio() { awk -v a="$1" -v b="$none" 'BEGIN { printf "%.3f", a / b }'; }
printf 'W1 instructions per request (callgrind, one run)\n'
printf '  no configuration file                        %s\n' "$none"
printf '  20 routes, W1 in fence namespace "w1"        %s  (%s x)\n' "$named" "$(ratio "$named")"
printf '  20 routes, W1 in the default namespace       %s  (%s x)\n' "$default" "$(ratio "$default")"
