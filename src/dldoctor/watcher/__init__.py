"""Code that runs in the watching process (`dldoctor run`, `dldoctor.watch()`): it starts the
job, owns the C++ monitor (ring drain, /proc sampler, analyzer, hang watchdog), tails the side
logs, and turns the monitor's findings into a Report. It never runs inside the job."""
