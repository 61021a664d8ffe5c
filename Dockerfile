# anchor in a container, built on a PyTorch CUDA base (docs/development.md,
# "A container image"):
#
#   scripts/gpu-prefix.sh                 # once, where Debian's registry is: build/gpu-prefix
#   podman build -t anchor:gpu .          # or docker build; the context is this source tree
#   podman run --rm --gpus all anchor:gpu anchor pilot /opt/anchor/share/anchor/configs/pilot.yaml --set device=cuda
#
# The base brings PyTorch 2.x with CUDA (so LibTorch, cuDNN and NCCL), nvcc and
# a Python whose torch anchor builds against; anchor's other libraries come
# from build/gpu-prefix in the context (Debian's -dev packages, unpacked: the
# base needs no package registry), exactly as on a GPU node (the torch2
# preset, NCCL required). BASE names any image with that much: the ctest
# install.container_image builds this file on a local one.
# Pin the base you use by digest (BASE=docker.io/pytorch/pytorch:<tag>@sha256:...):
# the image anchor records is only as reproducible as what it was built from.
#
# Two stages: the first builds (sources, build tree, cmake and ninja stay
# there), the second holds only what runs: /opt/anchor and the libraries of
# build/gpu-prefix its binaries' RUNPATH names, on RUNTIME_BASE (BASE unless
# given: a runtime image must carry the very torch the build linked, such as
# pytorch/pytorch's -runtime tag of the same version). It runs as an
# unprivileged user (uid 10001, HOME /home/anchor, working in /work).
# REVISION and VERSION go into the OCI labels:
#   podman build --build-arg REVISION="$(git rev-parse HEAD)" -t anchor:gpu .
ARG BASE=docker.io/pytorch/pytorch:2.7.0-cuda12.8-cudnn9-devel
ARG RUNTIME_BASE=${BASE}

FROM ${BASE} AS build
COPY . /opt/anchor/src
WORKDIR /opt/anchor/src
# cmake and ninja from the base when it has them, else from PyPI (the only
# download, and only then); then the GPU node's recipe, and the install.
RUN command -v cmake >/dev/null && command -v ninja >/dev/null || python3 -m pip install --no-cache-dir "cmake>=3.25,<4" ninja; \
    test -d build/gpu-prefix/usr || { echo "build/gpu-prefix is missing from the context: run scripts/gpu-prefix.sh first" >&2; exit 2; }; \
    cmake --preset torch2 -DANCHOR_TORCH_PYTHON="$(command -v python3)" -DCMAKE_INSTALL_PREFIX=/opt/anchor && \
    cmake --build --preset torch2 -j"$(nproc)" --target anchor anchor-torch anchor_shell_files anchor_package_docs && \
    cmake --install build/torch2 --strip

FROM ${RUNTIME_BASE}
ARG RUNTIME_BASE
ARG REVISION=unknown
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="anchor" \
      org.opencontainers.image.description="Prove a PyTorch training run on one node before the long run, and sign the record" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.base.name="${RUNTIME_BASE}"
COPY --from=build /opt/anchor/bin /opt/anchor/bin
COPY --from=build /opt/anchor/share /opt/anchor/share
COPY --from=build /opt/anchor/src/build/gpu-prefix/usr/lib /opt/anchor/src/build/gpu-prefix/usr/lib
# A user with no entry in /etc/passwd (the base's /etc is left as it is): its
# home and its working directory are its own.
RUN mkdir -p /home/anchor /work && chown 10001:10001 /home/anchor /work && chmod 0750 /home/anchor
ENV PATH=/opt/anchor/bin:${PATH} HOME=/home/anchor
USER 10001:10001
WORKDIR /work
# The image's digest is what a run records: pass it in
# (-e ANCHOR_CONTAINER_DIGEST=sha256:... or container.digest), or run with
# Podman's --privileged, whose /run/.containerenv names the image id
# (docs/manifest.md, "Container").
CMD ["anchor", "--help"]
