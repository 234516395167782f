#include "planner/plan.h"

#include "gtest/gtest.h"
