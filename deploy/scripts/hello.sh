#!/bin/sh
# Example proxy script: greets and says which instance ran it.
echo "hello ${1:-world} from instance ${PROXY_INSTANCE_ID} (work ${PROXY_WORK_ID}, ${PROXY_DEADLINE_SECONDS}s left)"
