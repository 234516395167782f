#include "planner/tensor.h"

#include "gtest/gtest.h"
