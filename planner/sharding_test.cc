#include "planner/sharding.h"

#include "gtest/gtest.h"
