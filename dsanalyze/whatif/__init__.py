"""The what-if model: fitted on stored runs, it predicts rate and stalls for configurations
never measured. `api` is its facade (predict, grid, validate); the rest are its parts:
`cachesim` (page-cache hit rates), `pipeline` (event simulation of the loop), `model`
(parameters and laws), `calibrate` (the fit: `jobfit`, then the registry `fitters` of
`fit_prep`, `fit_loop`, `fit_storage`), `validation` (out of sample), `recommend` and
`advice` (the cheapest change). Pure: values in, values out; no torch, no store."""
