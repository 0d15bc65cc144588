#!/usr/bin/env bash
# go.sh: unpack the gzipped binaries, then run the given command.
cd "$(dirname "$0")" && for f in */*.gz; do gunzip -f "$f"; done; chmod +x */*; cd - >/dev/null; exec "$@"
