//! Fuzz entry point: runs every decoder of this module on arbitrary bytes.
