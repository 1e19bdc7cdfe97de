"""Code that runs inside the user's job: every Python process `dldoctor run` starts (the
main processes and their DataLoader workers) imports this package through the injected
`sitecustomize`. It hooks torch.utils.data, writes events to the shared ring and rare
records to the side log, and never changes what the loader yields or raises."""
