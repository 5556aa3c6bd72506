"""The service's decisions between the API and workers and storage: what a message, a verdict or
a finished run moves a row to next (job lifecycles, dispatch, eval bookkeeping). Used by api/ and
worker/; uses db/ and cuset_core/, never the other way round."""
