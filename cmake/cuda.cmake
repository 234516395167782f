# CUDA / NCCL detection. MESHCAST_CUDA=AUTO builds the CUDA pieces when a CUDA
# toolkit (nvcc) and NCCL are found (default location /usr/local/cuda); ON
# requires them; OFF skips them. Defines MESHCAST_HAVE_CUDA and, when on, the
# imported target meshcast::nccl.
set(MESHCAST_HAVE_CUDA OFF)
if(NOT MESHCAST_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  find_library(MESHCAST_NCCL_LIBRARY nccl
    HINTS /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu)
  find_path(MESHCAST_NCCL_INCLUDE nccl.h
    HINTS /usr/local/cuda/include /usr/include)
  if(CMAKE_CUDA_COMPILER AND MESHCAST_NCCL_LIBRARY AND MESHCAST_NCCL_INCLUDE)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 has no CUDA20 for nvcc
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    add_library(meshcast_nccl INTERFACE)
    target_include_directories(meshcast_nccl INTERFACE ${MESHCAST_NCCL_INCLUDE})
    target_link_libraries(meshcast_nccl INTERFACE ${MESHCAST_NCCL_LIBRARY} CUDA::cudart)
    add_library(meshcast::nccl ALIAS meshcast_nccl)
    set(MESHCAST_HAVE_CUDA ON)
    message(STATUS "meshcast: CUDA ${CMAKE_CUDA_COMPILER_VERSION}, NCCL ${MESHCAST_NCCL_LIBRARY}, arch ${CMAKE_CUDA_ARCHITECTURES}")
  elseif(MESHCAST_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MESHCAST_CUDA=ON but CUDA (nvcc) or NCCL was not found")
  else()
    message(STATUS "meshcast: CUDA or NCCL not found, building CPU pieces only")
  endif()
endif()
