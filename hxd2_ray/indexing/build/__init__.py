"""The index build use case: one flow (:mod:`.flow`) over an injected stage runner (:mod:`hxd2_ray.stages.runner`)."""
