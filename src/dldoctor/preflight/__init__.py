"""`dldoctor check`: machine facts in (the C++ readers plus what only Python can tell), a
list of OK / WARN / FAIL verdicts out. No job runs; nothing here is imported by the job."""
