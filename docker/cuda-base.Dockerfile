# A CUDA base image for docker/Dockerfile: an nvidia/cuda runtime image plus the distribution's Python with its
# venv module (the nvidia/cuda images carry no Python; drl needs >= 3.11). Nothing drl-specific is in it.
#
#   docker build -f docker/cuda-base.Dockerfile -t drl-cuda-base:12.8 docker
#   docker build -f docker/Dockerfile -t drl:cuda \
#       --build-arg BASE_IMAGE=drl-cuda-base:12.8 \
#       --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 .
#
# Build arguments:
#   CUDA_IMAGE      an Ubuntu-based nvidia/cuda image; its CUDA version should match the torch index's (cuXYZ).
#   PYTHON_VERSION  the distribution's Python package: 3.12 on Ubuntu 24.04 (default); 3.11 on Ubuntu 22.04
#                   (from universe; 22.04's own python3 is 3.10, too old for drl).

ARG CUDA_IMAGE=nvidia/cuda:12.8.1-runtime-ubuntu24.04

FROM ${CUDA_IMAGE}
ARG PYTHON_VERSION=3.12
# The Python packages come from the Ubuntu release that CUDA_IMAGE's tag fixes; their exact version strings
# change with every security update of that release, so they are not pinned here (DL3008).
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        "python${PYTHON_VERSION}" "python${PYTHON_VERSION}-venv" \
    && rm -rf /var/lib/apt/lists/* \
    && ln -sf "/usr/bin/python${PYTHON_VERSION}" /usr/local/bin/python3
