#!/bin/bash
# Like the real bases' entrypoint: run the given command in the image's environment.
set -e
exec "$@"
