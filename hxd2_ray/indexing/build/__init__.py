"""The index build use case: one flow (:mod:`.flow`) over an injected stage runner (:mod:`.runner`)."""
