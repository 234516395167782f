#include "planner/unit_task.h"

#include "gtest/gtest.h"
