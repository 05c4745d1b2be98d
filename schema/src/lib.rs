//! hipDNN wire schemas, the safe graph model and plugin API versioning (issue 2 fills this in).
