#include "planner/strategy.h"

#include "gtest/gtest.h"
