/*
 * version.h — the one place hanayo's version is written.
 *
 * `hanayo --version` prints it with the backends compiled in
 * (hy_backends_compiled() in backend.h); checkpoints may record it.
 */
#ifndef HY_VERSION_H
#define HY_VERSION_H

#define HY_VERSION "0.1.0"

#endif
