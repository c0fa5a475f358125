package dev.mirrorflow.kafka.read;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;

import java.util.List;

import org.junit.jupiter.api.Test;

class RangeGroupsTest {

    private static TopicRange r(String topic, int partition, long start, long end) {
        return new TopicRange(topic, partition, start, end);
    }

    @Test
    void groupsMergeLargestFirstIntoTheLeastLoaded() {
        List<List<TopicRange>> groups = List.of(List.of(r("a", 0, 0, 100)), List.of(r("a", 1, 0, 40)),
                List.of(r("a", 2, 0, 90)), List.of(r("b", 0, 0, 50), r("b", 1, 0, 10)));
        assertEquals(List.of(List.of(r("a", 0, 0, 100), r("a", 1, 0, 40)),
                List.of(r("a", 2, 0, 90), r("b", 0, 0, 50), r("b", 1, 0, 10))), RangeGroups.coalesced(groups, 2));
        assertSame(groups, RangeGroups.coalesced(groups, 4));  // no more groups than tasks: as they are
        assertEquals(1, RangeGroups.coalesced(groups, 1).size());
    }

    @Test
    void piecesOfOnePartitionStayInTasksOfTheirOwn() {
        List<List<TopicRange>> groups = List.of(List.of(r("a", 0, 0, 50)), List.of(r("a", 0, 50, 100)),
                List.of(r("a", 0, 100, 150)), List.of(r("a", 1, 0, 10)));
        List<List<TopicRange>> merged = RangeGroups.coalesced(groups, 2);
        assertEquals(3, merged.size());  // one more task than asked: a consumer reads a partition once
        assertEquals(List.of(List.of(r("a", 0, 0, 50), r("a", 1, 0, 10)), List.of(r("a", 0, 50, 100)),
                List.of(r("a", 0, 100, 150))), merged);
    }
}
