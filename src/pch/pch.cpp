// Compiled only to produce the shared torch precompiled header.
