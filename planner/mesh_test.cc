#include "planner/mesh.h"

#include "gtest/gtest.h"
