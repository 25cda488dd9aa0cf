#!/bin/sh
# Registers $TEMPORAL_NAMESPACE on the Temporal server at $TEMPORAL_ADDRESS unless it exists.
# turngate's worker then adds its search attributes to it when it starts.
set -eu
NAMESPACE="${TEMPORAL_NAMESPACE:-default}"
RETENTION="${TEMPORAL_NAMESPACE_RETENTION:-72h}"

attempt=0
until temporal operator cluster health --address "$TEMPORAL_ADDRESS"; do
  attempt=$((attempt + 1))
  if [ "$attempt" -ge 30 ]; then
    echo "Temporal at $TEMPORAL_ADDRESS is not healthy after $attempt attempts" >&2
    exit 1
  fi
  sleep 2
done

if temporal operator namespace describe --namespace "$NAMESPACE" --address "$TEMPORAL_ADDRESS" >/dev/null 2>&1; then
  echo "namespace $NAMESPACE exists"
else
  temporal operator namespace create --namespace "$NAMESPACE" --retention "$RETENTION" --address "$TEMPORAL_ADDRESS"
  echo "namespace $NAMESPACE created (retention $RETENTION)"
fi
