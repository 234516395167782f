# CUDA / NCCL detection. MESHCAST_CUDA=AUTO builds the CUDA pieces when a CUDA
# toolkit (nvcc) and NCCL are found (default location /usr/local/cuda); ON
# requires them; OFF skips them. Defines MESHCAST_HAVE_CUDA and, when on, the
# imported targets meshcast::nccl and CUDA::cudart.
#
# Robust to the combination the project is built with, Debian's own CMake
# (3.25) and CUDA 13: the toolkit root is taken from the nvcc that was found
# and given to FindCUDAToolkit (so it does not guess from PATH), the module is
# asked only for what the project links (the CUDA runtime), and when it
# cannot provide CUDA::cudart (a module older than the toolkit's layout;
# CUDA 13 no longer ships nvToolsExt, for one) the runtime library and
# headers are found directly under that root instead.
# tests/deploy/check_cmake_cuda.py configures both paths.
set(MESHCAST_HAVE_CUDA OFF)
if(NOT MESHCAST_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  set(_meshcast_cuda_root "")
  if(CMAKE_CUDA_COMPILER)
    # <root>/bin/nvcc, through symlinks (/usr/local/cuda -> cuda-13.0).
    get_filename_component(_meshcast_nvcc "${CMAKE_CUDA_COMPILER}" REALPATH)
    get_filename_component(_meshcast_cuda_root "${_meshcast_nvcc}" DIRECTORY)
    get_filename_component(_meshcast_cuda_root "${_meshcast_cuda_root}" DIRECTORY)
  endif()
  find_library(MESHCAST_NCCL_LIBRARY nccl
    HINTS ${_meshcast_cuda_root}/lib64 /usr/local/cuda/lib64 /usr/local/cuda/lib
          /usr/lib/x86_64-linux-gnu)
  find_path(MESHCAST_NCCL_INCLUDE nccl.h
    HINTS ${_meshcast_cuda_root}/include /usr/local/cuda/include /usr/include)
  if(CMAKE_CUDA_COMPILER AND MESHCAST_NCCL_LIBRARY AND MESHCAST_NCCL_INCLUDE)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    if(NOT CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT})
      set(CUDAToolkit_ROOT "${_meshcast_cuda_root}")
    endif()
    # Not REQUIRED: a failure is handled below, with a clear message.
    find_package(CUDAToolkit QUIET)
    if(TARGET CUDA::cudart)
      message(STATUS "meshcast: CUDA runtime from FindCUDAToolkit (${CUDAToolkit_LIBRARY_DIR})")
    else()
      find_library(MESHCAST_CUDART_LIBRARY cudart
        HINTS ${_meshcast_cuda_root}/lib64 ${_meshcast_cuda_root}/lib
              ${_meshcast_cuda_root}/targets/x86_64-linux/lib
              ${_meshcast_cuda_root}/targets/sbsa-linux/lib
        NO_DEFAULT_PATH)
      find_path(MESHCAST_CUDART_INCLUDE cuda_runtime_api.h
        HINTS ${_meshcast_cuda_root}/include
              ${_meshcast_cuda_root}/targets/x86_64-linux/include
              ${_meshcast_cuda_root}/targets/sbsa-linux/include
        NO_DEFAULT_PATH)
      if(NOT MESHCAST_CUDART_LIBRARY OR NOT MESHCAST_CUDART_INCLUDE)
        message(FATAL_ERROR
          "meshcast: nvcc found at ${CMAKE_CUDA_COMPILER}, but neither "
          "FindCUDAToolkit nor a direct search under ${_meshcast_cuda_root} "
          "found the CUDA runtime (libcudart, cuda_runtime_api.h); set "
          "CUDAToolkit_ROOT or MESHCAST_CUDA=OFF")
      endif()
      add_library(CUDA::cudart UNKNOWN IMPORTED)
      set_target_properties(CUDA::cudart PROPERTIES
        IMPORTED_LOCATION "${MESHCAST_CUDART_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${MESHCAST_CUDART_INCLUDE}")
      message(STATUS "meshcast: FindCUDAToolkit gave no CUDA::cudart; using ${MESHCAST_CUDART_LIBRARY}")
    endif()
    set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 has no CUDA20 for nvcc
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    add_library(meshcast_nccl INTERFACE)
    target_include_directories(meshcast_nccl INTERFACE ${MESHCAST_NCCL_INCLUDE})
    target_link_libraries(meshcast_nccl INTERFACE ${MESHCAST_NCCL_LIBRARY} CUDA::cudart)
    add_library(meshcast::nccl ALIAS meshcast_nccl)
    set(MESHCAST_HAVE_CUDA ON)
    message(STATUS "meshcast: CUDA ${CMAKE_CUDA_COMPILER_VERSION}, NCCL ${MESHCAST_NCCL_LIBRARY}, arch ${CMAKE_CUDA_ARCHITECTURES}, CMake ${CMAKE_VERSION}")
  elseif(MESHCAST_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MESHCAST_CUDA=ON but CUDA (nvcc) or NCCL was not found")
  else()
    message(STATUS "meshcast: CUDA or NCCL not found, building CPU pieces only")
  endif()
endif()
